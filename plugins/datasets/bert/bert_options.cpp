// The `bert` dataset's [data] keys (the blend keys are the core's, as for gpt) and reading them
// into BertDataOptions.
#include "bert_options.h"

#include "megatron/config/value.h"

namespace megatron::bert_data {

void declare_bert_data_config(config::TableSchema& s) {
  using config::Range;
  data::declare_sentence_blend_keys(s);
  s.add({"seq_length",
         config::ValueKind::integer,
         config::Presence::required,
         std::int64_t{0},
         Range::at_least(5),
         {},
         "tokens per sample, [CLS] and [SEP]s included"})
      .string("tokenizer_type", "BertWordPieceLowerCase", "Megatron's --tokenizer-type",
              {"BertWordPieceLowerCase", "BertWordPieceCase"})
      .optional_path("vocab_file", "WordPiece vocabulary, one token per line")
      .integer("vocab_extra_ids", 0, "<extra_id_N> tokens appended to the vocabulary",
               Range::at_least(0))
      .optional_path("data_cache_path",
                     "folder for the sample index cache (default: <prefix>/cache/"
                     "BERTMaskedWordPieceDataset_indices for each dataset)")
      .real("mask_prob", 0.15, "share of tokens masked", Range::between(0, 1))
      .real("short_seq_prob", 0.1, "share of samples with a shorter target length",
            Range::between(0, 1))
      .boolean("bert_binary_head", true,
               "sentence-order pairs (two segments, swapped half the time); false is Megatron's "
               "--bert-no-binary-head")
      .boolean("mmap_bin_files", true,
               "accepted for Megatron compatibility; .bin files are always memory-mapped")
      .real("mid_level_dataset_surplus", data::kDefaultMidLevelSurplus,
            "extra share each blended dataset is built with so the blend never runs out",
            Range::at_least(0));
  s.rule([](const config::ConfigTable& t) {
    if (!t.has("vocab_file")) t.fail("vocab_file", "required key is missing: WordPiece needs it");
  });
}

BertDataOptions read_bert_data_options(const config::ConfigTable& t,
                                       const config::CoreConfig& core) {
  BertDataOptions o;
  data::read_masked_data_options(t, o);
  o.sample.sequence_length = t.integer("seq_length");
  o.sample.classification_head = t.boolean("bert_binary_head");
  o.sample.seed = core.training.seed;
  o.sample.short_sequence_probability = t.real("short_seq_prob");
  // pretrain_bert.py's masking: whole words, n-grams up to 3 with P(n) ~ 1/n, 80/10/10.
  o.sample.masking.masking_probability = t.real("mask_prob");
  return o;
}

}  // namespace megatron::bert_data
