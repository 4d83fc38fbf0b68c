// The `t5` dataset's [data] keys (the blend keys are the core's, as for gpt and bert) and reading
// them into T5DataOptions.
#include "t5_options.h"

#include "megatron/config/value.h"

namespace megatron::t5_data {

void declare_t5_data_config(config::TableSchema& s) {
  using config::Range;
  data::declare_sentence_blend_keys(s);
  // Megatron takes the encoder length from --encoder-seq-length or --seq-length, never both
  // (arguments.py). Its sample mapping targets encoder_seq_length - 2 tokens, at least 2.
  s.optional_integer("encoder_seq_length",
                     "encoder tokens per sample (sentinels included); Megatron's "
                     "--encoder-seq-length",
                     Range::at_least(4))
      .optional_integer("seq_length", "the same as encoder_seq_length (Megatron's --seq-length)",
                        Range::at_least(4))
      .add({"decoder_seq_length",
            config::ValueKind::integer,
            config::Presence::required,
            std::int64_t{0},
            Range::at_least(3),
            {},
            "decoder tokens per sample: [BOS], then a sentinel and the tokens of each masked "
            "span (Megatron's --decoder-seq-length; its examples use 128)"})
      .string("tokenizer_type", "BertWordPieceCase", "Megatron's --tokenizer-type",
              {"BertWordPieceCase", "BertWordPieceLowerCase"})
      .optional_path("vocab_file", "WordPiece vocabulary, one token per line")
      .integer("vocab_extra_ids", 0,
               "<extra_id_N> sentinel tokens appended to the vocabulary, one per masked span of "
               "a sample (Megatron's examples use 100)",
               Range::at_least(0))
      .optional_path("data_cache_path",
                     "folder for the sample index cache (default: <prefix>/cache/"
                     "T5MaskedWordPieceDataset_indices for each dataset)")
      .real("mask_prob", 0.15, "share of tokens masked", Range::between(0, 1))
      .real("short_seq_prob", 0.1, "share of samples with a shorter target length",
            Range::between(0, 1))
      .boolean("mmap_bin_files", true,
               "accepted for Megatron compatibility; .bin files are always memory-mapped")
      .real("mid_level_dataset_surplus", data::kDefaultMidLevelSurplus,
            "extra share each blended dataset is built with so the blend never runs out",
            Range::at_least(0));
  s.rule([](const config::ConfigTable& t) {
    if (!t.has("vocab_file")) t.fail("vocab_file", "required key is missing: WordPiece needs it");
    if (t.has("seq_length") && t.has("encoder_seq_length")) {
      t.fail("seq_length",
             "give the encoder length once: seq_length and encoder_seq_length are the same "
             "setting (Megatron asserts that only one is given)");
    }
    if (!t.has("seq_length") && !t.has("encoder_seq_length")) {
      t.fail("encoder_seq_length", "required key is missing: the encoder length of the samples");
    }
    if (t.integer("vocab_extra_ids") < 1) {
      t.fail("vocab_extra_ids",
             "T5 replaces each masked span with a sentinel <extra_id_N>, which the tokenizer "
             "has only with vocab_extra_ids > 0 (Megatron's examples use 100)");
    }
  });
}

T5DataOptions read_t5_data_options(const config::ConfigTable& t, const config::CoreConfig& core) {
  T5DataOptions o;
  data::read_masked_data_options(t, o);
  o.sample.encoder_length =
      t.has("encoder_seq_length") ? t.integer("encoder_seq_length") : t.integer("seq_length");
  o.sample.decoder_length = t.integer("decoder_seq_length");
  o.sample.seed = core.training.seed;
  o.sample.short_sequence_probability = t.real("short_seq_prob");
  o.sample.masking = data::t5_masking_options(t.real("mask_prob"));
  return o;
}

}  // namespace megatron::t5_data
