// The `gpt` dataset's [data] keys, their cross-key rules, and reading them into GptDataOptions.
#include "gpt_options.h"

#include <filesystem>

#include "megatron/config/value.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/error.h"

namespace megatron::gpt_data {

namespace {

using config::ConfigTable;
using config::Range;

constexpr std::array<const char*, 3> kPerSplitKeys = {"train_data_path", "valid_data_path",
                                                      "test_data_path"};

bool any_per_split(const ConfigTable& t) {
  for (const char* key : kPerSplitKeys) {
    if (t.has(key)) return true;
  }
  return false;
}

// Absolute, so the cache descriptions (which hold the paths) do not depend on the directory the
// job was started from when the config file was named by a relative path.
std::string absolute(const std::string& path) {
  return std::filesystem::absolute(path).lexically_normal().string();
}

BlendSpec read_blend(const ConfigTable& t, const std::string& key) {
  const config::WeightedPaths paths = config::split_weighted_paths(t.string_list(key));
  BlendSpec spec{key, {}, paths.weights};
  for (const std::string& prefix : paths.paths)
    spec.prefixes.push_back(absolute(prefix));
  for (const std::string& prefix : spec.prefixes) {
    for (const auto& file : {idx_path(prefix), bin_path(prefix)}) {
      if (!std::filesystem::is_regular_file(file)) {
        t.fail(key, "dataset file " + file.string() +
                        " does not exist (a path here is a prefix P naming P.idx and P.bin, as "
                        "`megatron-app preprocess` writes them)");
      }
    }
  }
  return spec;
}

}  // namespace

std::string per_split_key(data::Split split) {
  return kPerSplitKeys[static_cast<std::size_t>(split)];
}

void declare_gpt_data_config(config::TableSchema& s) {
  s.optional_weighted_path_list(
       "data_path",
       "dataset prefixes (P.idx/P.bin) split by `split`: [\"P\"] or [weight, \"P\", weight, "
       "\"Q\", ...]; weights may also be numbers in strings, as on Megatron's command line")
      .string("split", std::string(data::kDefaultSplit),
              "train, valid, test weights of data_path, e.g. \"949,50,1\"")
      .optional_weighted_path_list("train_data_path", "the train split's own blend (no `split`)")
      .optional_weighted_path_list("valid_data_path", "the valid split's own blend (no `split`)")
      .optional_weighted_path_list("test_data_path", "the test split's own blend (no `split`)")
      .add({"seq_length",
            config::ValueKind::integer,
            config::Presence::required,
            std::int64_t{0},
            Range::positive(),
            {},
            "tokens per sample"})
      .string("tokenizer_type", "GPT2BPETokenizer", "Megatron's --tokenizer-type")
      .optional_path("vocab_file", "tokenizer vocabulary (encoder.json for GPT2BPETokenizer)")
      .optional_path("merge_file", "BPE merges (vocab.bpe for GPT2BPETokenizer)")
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

  s.rule([](const ConfigTable& t) {
    if (t.has("data_path") && any_per_split(t)) {
      for (const char* key : kPerSplitKeys) {
        if (t.has(key)) {
          t.fail(key,
                 "data_path and per-split paths cannot be combined: give data_path with "
                 "`split`, or train_data_path / valid_data_path / test_data_path");
        }
      }
    }
    if (!t.has("data_path") && !any_per_split(t)) {
      t.fail("data_path",
             "required key is missing: give data_path, or train_data_path / valid_data_path / "
             "test_data_path");
    }
    if (!t.has("data_path") && t.is_set("split")) {
      t.fail("split", "split divides data_path; the per-split paths are used as they are");
    }
    try {
      data::parse_split(t.string("split"));
    } catch (const Error& e) {
      t.fail("split", e.what());
    }
  });
}

GptDataOptions read_gpt_data_options(const ConfigTable& t, const config::CoreConfig& core) {
  GptDataOptions o;
  if (t.has("data_path")) {
    o.blend = read_blend(t, "data_path");
    o.split = t.string("split");
    o.split_matrix = data::split_matrix(data::parse_split(*o.split));
  }
  for (data::Split split : data::kSplits) {
    const std::string key = per_split_key(split);
    if (t.has(key)) o.blend_per_split[static_cast<std::size_t>(split)] = read_blend(t, key);
  }
  o.seq_length = t.integer("seq_length");
  o.tokenizer_type = t.string("tokenizer_type");
  if (t.has("vocab_file")) o.tokenizer_files.vocab_file = absolute(t.string("vocab_file"));
  if (t.has("merge_file")) o.tokenizer_files.merge_file = absolute(t.string("merge_file"));
  if (o.tokenizer_type == "GPT2BPETokenizer") {
    for (const char* key : {"vocab_file", "merge_file"}) {
      if (!t.has(key)) t.fail(key, "required key is missing: GPT2BPETokenizer needs it");
    }
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
