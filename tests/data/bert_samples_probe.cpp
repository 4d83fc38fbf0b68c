// Test helper: runs the masked-dataset code on the cases bert_samples_reference.py writes and
// dumps what it computes (mapping .npy, samples, maskings and cache names as JSON) for the
// reference to compare. Usage: bert_samples_probe CASES.json OUTPUT_DIR
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megatron/data/indexed_dataset.h"
#include "megatron/data/masked_samples.h"
#include "megatron/data/npy.h"
#include "megatron/data/numpy_random.h"
#include "megatron/data/split.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using namespace megatron::data;

// The vocabulary a case names: strings in id order, the special ids and the lookup list.
struct Vocabulary {
  std::vector<std::uint8_t> continues_word;
  std::vector<std::int64_t> token_lookup;
  WordPieceVocabulary view;
};

Vocabulary load_vocabulary(const Json& c) {
  Vocabulary v;
  const auto strings = c.at("vocab").get<std::vector<std::string>>();
  v.continues_word = continues_word_table(strings);
  v.token_lookup = c.at("token_lookup").get<std::vector<std::int64_t>>();
  v.view.cls = c.at("cls");
  v.view.sep = c.at("sep");
  v.view.pad = c.at("pad");
  v.view.mask = c.at("mask");
  v.view.continues_word = v.continues_word;
  v.view.token_lookup = v.token_lookup;
  return v;
}

MaskingOptions masking_options(const Json& m) {
  MaskingOptions o;
  o.masking_probability = m.at("masking_probability");
  o.masking_max_ngram = m.at("masking_max_ngram");
  o.masking_do_full_word = m.at("masking_do_full_word");
  o.masking_do_permutation = m.at("masking_do_permutation");
  o.masking_use_longer_ngrams = m.at("masking_use_longer_ngrams");
  o.masking_use_geometric_distribution = m.at("masking_use_geometric_distribution");
  return o;
}

std::optional<std::int64_t> optional_int(const Json& value) {
  if (value.is_null()) return std::nullopt;
  return value.get<std::int64_t>();
}

Json run_bert(const Json& c, const fs::path& out_dir, const Vocabulary& vocabulary) {
  const megatron::IndexedDataset dataset(c.at("prefix").get<std::string>());
  BertSampleOptions options;
  options.sequence_length = c.at("sequence_length");
  options.classification_head = c.at("classification_head");
  options.seed = c.at("seed");
  options.short_sequence_probability = c.at("short_seq_prob");
  options.masking = masking_options(c.at("masking"));
  const auto num_samples = optional_int(c.at("num_samples"));

  const std::vector<std::int64_t> documents = dataset.document_indices();
  const std::vector<std::int32_t> lengths = dataset.sequence_lengths();
  const IndexArray mapping =
      build_sample_mapping(documents, c.at("document_begin"), c.at("document_end"), lengths,
                           bert_sample_mapping_options(options, num_samples));
  const std::string id = c.at("id");
  write_npy(out_dir / (id + ".mapping.npy"), mapping);

  Json samples = Json::array();
  const auto count = std::min(c.at("samples").get<std::size_t>(), mapping.rows());
  for (std::size_t i = 0; i < count; ++i) {
    const BertSample s =
        make_bert_sample(dataset, mapping, static_cast<std::int64_t>(i), options, vocabulary.view);
    samples.push_back({{"text", s.text},
                       {"types", s.types},
                       {"labels", s.labels},
                       {"loss_mask", s.loss_mask},
                       {"padding_mask", s.padding_mask},
                       {"is_random", s.is_random},
                       {"truncated", s.truncated}});
  }

  GptDatasetIdentity identity;
  identity.dataset_path = c.at("prefix");
  identity.split = static_cast<Split>(c.at("split_index").get<int>());
  identity.split_string = c.at("split_string").get<std::string>();
  identity.split_matrix = split_matrix(parse_split(*identity.split_string));
  identity.tokenizer.class_name = c.at("tokenizer_class");
  identity.tokenizer.paths = c.at("tokenizer_paths").get<std::vector<std::string>>();
  const std::string description = bert_description(identity, options, num_samples);
  const MaskedCacheFiles files = bert_cache_files("CACHE", description);
  return {{"samples", samples},
          {"description", description},
          {"description_file", files.description.string()},
          {"sample_index_file", files.sample_index.string()},
          {"default_cache_dir", default_bert_cache_dir(identity.dataset_path).string()}};
}

Json run_masking(const Json& c, const Vocabulary& vocabulary) {
  const MaskingOptions options = masking_options(c.at("masking"));
  const auto replacement =
      c.at("replacement") == "bert" ? MaskReplacement::kBert : MaskReplacement::kAlwaysMask;
  std::optional<NumpyRandomState> global;
  if (!c.at("global_seed").is_null()) global.emplace(c.at("global_seed").get<std::int64_t>());
  Json results = Json::array();
  for (const auto& sequence : c.at("sequences")) {
    NumpyRandomState random(sequence.at("seed").get<std::int64_t>());
    const auto tokens = sequence.at("tokens").get<std::vector<std::int64_t>>();
    const MaskedLmPredictions p =
        create_masked_lm_predictions(tokens, sequence.at("target"), options, vocabulary.view,
                                     replacement, random, global ? &*global : nullptr);
    Json spans = Json::array();
    for (const auto& span : p.spans)
      spans.push_back({span.positions, span.labels});
    // The next word tells whether the state advanced by exactly Megatron's draws.
    results.push_back({{"tokens", p.tokens},
                       {"positions", p.positions},
                       {"labels", p.labels},
                       {"boundaries", p.boundaries},
                       {"spans", spans},
                       {"next_word", random.next_uint32()}});
  }
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: bert_samples_probe CASES.json OUTPUT_DIR\n";
    return 2;
  }
  try {
    const Json cases = Json::parse(std::ifstream(argv[1]));
    const fs::path out_dir = argv[2];
    Json results = Json::object();
    for (const auto& c : cases) {
      const Vocabulary vocabulary = load_vocabulary(c);
      const std::string kind = c.at("kind");
      results[c.at("id").get<std::string>()] =
          kind == "bert" ? run_bert(c, out_dir, vocabulary) : run_masking(c, vocabulary);
    }
    std::ofstream(out_dir / "results.json") << results.dump();
  } catch (const std::exception& e) {
    std::cerr << "bert_samples_probe: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
