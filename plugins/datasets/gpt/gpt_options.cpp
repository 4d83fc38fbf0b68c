// The `gpt` dataset's [data] keys (the blend keys are the core's) and reading them into
// GptDataOptions.
#include "gpt_options.h"

#include <filesystem>

#include "megatron/config/value.h"
#include "megatron/tokenizer/sentencepiece_tokenizer.h"

namespace megatron::gpt_data {

namespace {

using config::ConfigTable;
using config::Range;

// Absolute, so the cache descriptions (which hold the paths) do not depend on the directory the
// job was started from when the config file was named by a relative path.
std::string absolute(const std::string& path) {
  return std::filesystem::absolute(path).lexically_normal().string();
}

}  // namespace

void declare_gpt_data_config(config::TableSchema& s) {
  data::declare_blend_keys(
      s, {"dataset prefixes (P.idx/P.bin) split by `split`: [\"P\"] or [weight, \"P\", weight, "
          "\"Q\", ...]; weights may also be numbers in strings, as on Megatron's command line",
          "train, valid, test weights of data_path, e.g. \"949,50,1\""});
  s.add({"seq_length",
         config::ValueKind::integer,
         config::Presence::required,
         std::int64_t{0},
         Range::positive(),
         {},
         "tokens per sample"})
      .string("tokenizer_type", "GPT2BPETokenizer", "Megatron's --tokenizer-type")
      .optional_path("vocab_file", "tokenizer vocabulary (encoder.json for GPT2BPETokenizer)")
      .optional_path("merge_file", "BPE merges (vocab.bpe for GPT2BPETokenizer)")
      .optional_path("tokenizer_model",
                     "SentencePiece model (.model) for GPTSentencePieceTokenizer and "
                     "SentencePieceTokenizer")
      .optional_integer("vocab_size", "NullTokenizer's vocabulary size (ids 0..vocab_size-1)",
                        Range::at_least(1))
      .optional_path("data_cache_path",
                     "folder for the sample index cache (default: <prefix>/cache/"
                     "GPTDataset_indices for each dataset)")
      .boolean("eod_mask_loss", false, "no loss on positions whose input token is end-of-document")
      .boolean("reset_position_ids", false,
               "positions restart at 0 after each end-of-document token (adds the sample field "
               "position_ids; read by learned_absolute position embeddings only, as in "
               "Megatron-core, where rope ignores it)")
      .boolean("reset_attention_mask", false,
               "tokens after an end-of-document token do not attend to earlier documents (adds "
               "the sample field attention_mask: per token, the first position it may attend to)")
      .boolean("mmap_bin_files", true,
               "accepted for Megatron compatibility; .bin files are always memory-mapped")
      .boolean("drop_last_partial_validation_sequence", true,
               "false: keep the valid split's short last sample, padded and loss-masked")
      .real("mid_level_dataset_surplus", 0.005,
            "extra share each blended dataset is built with so the blend never runs out",
            Range::at_least(0));
}

GptDataOptions read_gpt_data_options(const ConfigTable& t, const config::CoreConfig& core) {
  GptDataOptions o;
  o.blends = data::read_blend_config(t, "megatron-app preprocess");
  o.seq_length = t.integer("seq_length");
  o.tokenizer_type = t.string("tokenizer_type");
  if (t.has("vocab_file")) o.tokenizer_files.vocab_file = absolute(t.string("vocab_file"));
  if (t.has("merge_file")) o.tokenizer_files.merge_file = absolute(t.string("merge_file"));
  if (t.has("tokenizer_model")) {
    o.tokenizer_files.tokenizer_model = absolute(t.string("tokenizer_model"));
  }
  if (o.tokenizer_type == "GPT2BPETokenizer") {
    for (const char* key : {"vocab_file", "merge_file"}) {
      if (!t.has(key)) t.fail(key, "required key is missing: GPT2BPETokenizer needs it");
    }
  }
  if (o.tokenizer_type == "NullTokenizer") {
    if (!t.has("vocab_size"))
      t.fail("vocab_size", "required key is missing: NullTokenizer needs it");
    o.tokenizer_files.vocab_size = t.integer("vocab_size");
  }
  if (is_sentencepiece_tokenizer_type(o.tokenizer_type) && !t.has("tokenizer_model")) {
    t.fail("tokenizer_model", "required key is missing: " + o.tokenizer_type + " needs it");
  }
  if (t.has("data_cache_path")) o.data_cache_path = absolute(t.string("data_cache_path"));
  o.eod_mask_loss = t.boolean("eod_mask_loss");
  o.reset_position_ids = t.boolean("reset_position_ids");
  o.reset_attention_mask = t.boolean("reset_attention_mask");
  o.drop_last_partial_validation_sequence = t.boolean("drop_last_partial_validation_sequence");
  o.mid_level_dataset_surplus = t.real("mid_level_dataset_surplus");
  o.seed = core.training.seed;
  return o;
}

}  // namespace megatron::gpt_data
