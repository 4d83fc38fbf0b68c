// The tiny BERT the model tests build: 2 layers, hidden 16, 4 heads, ffn 24, no attention dropout,
// an initialisation large enough that every path carries a visible gradient.
#pragma once

#include "bert_model.h"

namespace megatron::bert {

inline BertConfig tiny_bert_config(bool binary_head, float hidden_dropout = 0.0f) {
  BertConfig c;
  c.binary_head = binary_head;
  nn::TransformerConfig& t = c.model.transformer;
  t.num_layers = 2;
  t.hidden_size = 16;
  t.num_attention_heads = 4;
  t.num_query_groups = 4;
  t.kv_channels = 4;
  t.ffn_hidden_size = 24;
  t.hidden_dropout = hidden_dropout;
  t.attention_dropout = 0;
  t.init_method_std = 0.2f;
  c.model.make_vocab_size_divisible_by = 8;
  return c;
}

}  // namespace megatron::bert
