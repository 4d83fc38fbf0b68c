// The `bert` dataset's [data] keys and reading them into BertDataOptions.
#include "bert_options.h"

#include <filesystem>

#include "megatron/config/value.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/error.h"

namespace megatron::bert_data {

namespace {
std::string absolute(const std::string& path) {
  return std::filesystem::absolute(path).lexically_normal().string();
}
}  // namespace

void declare_bert_data_config(config::TableSchema& s) {
  using config::Range;
  s.optional_weighted_path_list("data_path",
                                "the sentence-level dataset prefix (P.idx/P.bin from `preprocess "
                                "--split-sentences`): [\"P\"]")
      .string("split", std::string(data::kDefaultSplit),
              "train, valid, test weights over the documents, e.g. \"949,50,1\"")
      .add({"seq_length",
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
                     "BERTMaskedWordPieceDataset_indices)")
      .real("mask_prob", 0.15, "share of tokens masked", Range::between(0, 1))
      .real("short_seq_prob", 0.1, "share of samples with a shorter target length",
            Range::between(0, 1))
      .boolean("bert_binary_head", true,
               "sentence-order pairs (two segments, swapped half the time); false is Megatron's "
               "--bert-no-binary-head")
      .boolean("mmap_bin_files", true,
               "accepted for Megatron compatibility; .bin files are always memory-mapped");
  s.rule([](const config::ConfigTable& t) {
    if (!t.has("data_path")) t.fail("data_path", "required key is missing");
    if (!t.has("vocab_file")) t.fail("vocab_file", "required key is missing: WordPiece needs it");
    try {
      data::parse_split(t.string("split"));
    } catch (const Error& e) {
      t.fail("split", e.what());
    }
  });
}

BertDataOptions read_bert_data_options(const config::ConfigTable& t,
                                       const config::CoreConfig& core) {
  BertDataOptions o;
  const config::WeightedPaths paths = config::split_weighted_paths(t.string_list("data_path"));
  if (paths.paths.size() != 1 || !paths.weights.empty()) {
    t.fail("data_path",
           "the bert dataset reads one sentence-level dataset: [\"P\"] (blends are not "
           "supported for it yet)");
  }
  o.prefix = absolute(paths.paths[0]);
  for (const auto& file : {idx_path(o.prefix), bin_path(o.prefix)}) {
    if (!std::filesystem::is_regular_file(file)) {
      t.fail("data_path", "dataset file " + file.string() +
                              " does not exist (a path here is a prefix P naming P.idx and P.bin, "
                              "as `megatron-app preprocess --split-sentences` writes them)");
    }
  }
  o.split = t.string("split");
  o.split_matrix = data::split_matrix(data::parse_split(o.split));
  o.tokenizer_type = t.string("tokenizer_type");
  o.tokenizer_files.vocab_file = absolute(t.string("vocab_file"));
  o.tokenizer_files.vocab_extra_ids = t.integer("vocab_extra_ids");
  if (t.has("data_cache_path")) o.data_cache_path = absolute(t.string("data_cache_path"));
  o.sample.sequence_length = t.integer("seq_length");
  o.sample.classification_head = t.boolean("bert_binary_head");
  o.sample.seed = core.training.seed;
  o.sample.short_sequence_probability = t.real("short_seq_prob");
  // pretrain_bert.py's masking: whole words, n-grams up to 3 with P(n) ~ 1/n, 80/10/10.
  o.sample.masking.masking_probability = t.real("mask_prob");
  return o;
}

}  // namespace megatron::bert_data
