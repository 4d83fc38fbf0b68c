// Megatron's BERT chunk embeddings (tools/bert_embedding with --output-bert-embeddings): a chunk's
// text, end-of-text markers removed, WordPiece-tokenized and cut to max length - 2, as
// [CLS] tokens [SEP] (an empty text: one [PAD]), through a BERT checkpoint in evaluation mode;
// the embedding is the mean of the final (normed) hidden states over the tokens between [CLS]
// and [SEP] (legacy bert_model.py: mean(embedding[1 : length - 1])).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "megatron/dataset.h"
#include "megatron/log.h"
#include "megatron/model.h"
#include "megatron/nn/layer_stack_model.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::retro_data {

class BertEmbedder {
 public:
  // Creates the model the checkpoint's stored config names (through the host), builds it for
  // `max_length` tokens on one rank and loads the checkpoint into it (collective over the world).
  // ConfigError naming retro_bert_load when the checkpoint is not a BERT of this tokenizer.
  BertEmbedder(const std::filesystem::path& checkpoint, const Tokenizer& bert,
               std::int64_t max_length, const CommandServices& services, ParallelState& parallel,
               Logger& log);

  std::int64_t hidden_size() const { return hidden_; }
  // "<file> (iteration N)": what the embeddings were made with.
  const std::string& identity() const { return identity_; }
  // (texts.size(), hidden) f32 on the host.
  Tensor embed(const std::vector<std::string>& texts) const;

 private:
  // [CLS] WordPiece ids [SEP], cut to max_length_.
  std::vector<TokenId> sample_ids(const std::string& text) const;

  const Tokenizer& bert_;
  std::int64_t max_length_ = 0, hidden_ = 0;
  TokenId cls_ = 0, sep_ = 0, pad_ = 0;
  std::string identity_;
  std::unique_ptr<Model> owner_;
  nn::LayerStackModel* model_ = nullptr;
};

}  // namespace megatron::retro_data
