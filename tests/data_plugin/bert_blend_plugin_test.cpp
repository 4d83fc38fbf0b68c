// The `bert` dataset plugin over several sentence-level datasets, created through the catalog:
// a weighted blend serves its constituents' samples (each constituent built alone) in Megatron's
// greedy order, an unweighted blend uses one epoch of each dataset, per-split paths build each
// split from its own data, the constituents keep Megatron's cache file names, and bad blends are
// refused naming the key.
#include <array>
#include <filesystem>
#include <optional>
#include <type_traits>
#include <utility>

#include "dataset_plugin_fixture.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/data/masked_samples.h"
#include "megatron/data/tokenizer_vocabulary.h"
#include "megatron/error.h"
#include "megatron/tokenizer/tokenizer.h"
#include "sentence_dataset_writer.h"

namespace megatron::test {
namespace {

namespace fs = std::filesystem;
using data::Split;

const std::string kBertVocab = std::string(DATA_DIR) + "/bert-base-uncased-vocab.txt";
constexpr std::int64_t kSeqLength = 32;

// A sentence-level dataset as `preprocess --split-sentences` lays it out: `documents` documents
// of 2 to 5 sentences of 3 to 12 tokens drawn from [first_token, first_token + 900). Returns the
// prefix.
std::string write_sentences(const std::string& prefix, int documents, std::int32_t first_token,
                            unsigned seed) {
  return write_sentence_dataset(prefix, documents, {2, 5, 3, 12, first_token, first_token + 899},
                                seed);
}

// A document-level dataset (one sequence per document), which BERT cannot pair sentences from.
std::string write_documents(const std::string& prefix, int documents) {
  IndexedDatasetWriter writer(bin_path(prefix), IndexDType::u16);
  for (int d = 0; d < documents; ++d) {
    const std::vector<std::int32_t> tokens(10, 2000 + d);
    const std::vector<std::int64_t> lengths = {10};
    writer.add_document(tokens, lengths);
  }
  writer.finalize(idx_path(prefix));
  return prefix;
}

// A [data] table of the bert dataset: `keys` (data_path or the per-split paths, split, ...) plus
// the sequence length and vocabulary every test uses.
std::string bert_table(const std::string& keys) {
  return "[data]\ntype = \"bert\"\n" + keys + "\nseq_length = " + std::to_string(kSeqLength) +
         "\nvocab_file = " + quoted(kBertVocab) + "\n";
}

// A TOML list of already formatted items.
std::string toml_list(std::initializer_list<std::string> items) {
  std::string text = "[";
  for (const std::string& item : items)
    text += (text.size() > 1 ? ", " : "") + item;
  return text + "]";
}

// Every field of one BERT sample as the plugin serves it.
struct BertFields {
  std::vector<std::int32_t> text, types, labels, padding_mask;
  std::vector<float> loss_mask;
  std::int32_t is_random = 0, truncated = 0;
  bool operator==(const BertFields&) const = default;
};

BertFields plugin_sample(const Dataset& dataset, Split split, std::int64_t index) {
  Batch batch = Batch::allocate(dataset.sample_fields(), 1);
  dataset.get(split, index, batch.sample(0));
  BertFields f;
  f.text = field_values<std::int32_t>(batch, "text", kSeqLength);
  f.types = field_values<std::int32_t>(batch, "types", kSeqLength);
  f.labels = field_values<std::int32_t>(batch, "labels", kSeqLength);
  f.padding_mask = field_values<std::int32_t>(batch, "padding_mask", kSeqLength);
  f.loss_mask = field_values<float>(batch, "loss_mask", kSeqLength);
  f.is_random = field_values<std::int32_t>(batch, "is_random", 0).at(0);
  f.truncated = field_values<std::int32_t>(batch, "truncated", 0).at(0);
  return f;
}

// BERTMaskedWordPieceDataset through the core functions, with the options the tables above give
// (bert-base-uncased lower case, seed 1234, 15% masking, binary head): its sentence mapping, its
// samples and its cache description, independently of the plugin.
class CoreBert {
 public:
  CoreBert()
      : tokenizer_(make_tokenizer("BertWordPieceLowerCase", {kBertVocab, "", 0})),
        vocabulary_(*tokenizer_, /*random_replacements=*/true) {
    options_.sequence_length = kSeqLength;
  }

  // The mapping of all documents of `source` (splits "100,0,0" and per-split paths both give a
  // split every document).
  data::IndexArray mapping(const IndexedDataset& source,
                           std::optional<std::int64_t> num_samples) const {
    const std::vector<std::int64_t> documents = source.document_indices();
    return data::build_sample_mapping(
        documents, 0, static_cast<std::int64_t>(source.document_count()), source.sequence_lengths(),
        data::bert_sample_mapping_options(options_, num_samples));
  }

  BertFields sample(const IndexedDataset& source, const data::IndexArray& mapping,
                    std::int64_t item) const {
    const data::BertSample s =
        data::make_bert_sample(source, mapping, item, options_, vocabulary_.wordpiece());
    auto narrow = [](const std::vector<std::int64_t>& from, auto& to) {
      for (std::int64_t v : from)
        to.push_back(static_cast<typename std::remove_reference_t<decltype(to)>::value_type>(v));
    };
    BertFields f;
    narrow(s.text, f.text);
    narrow(s.types, f.types);
    narrow(s.labels, f.labels);
    narrow(s.padding_mask, f.padding_mask);
    narrow(s.loss_mask, f.loss_mask);
    f.is_random = static_cast<std::int32_t>(s.is_random);
    f.truncated = static_cast<std::int32_t>(s.truncated);
    return f;
  }

  // Megatron's cache sample index of the dataset at `prefix`: named by the md5 of its
  // description (no split string or matrix for a per-split path).
  fs::path cached_mapping(const std::string& prefix, Split split,
                          std::optional<std::string> split_string,
                          std::optional<std::int64_t> num_samples) const {
    data::GptDatasetIdentity identity;
    identity.dataset_path = prefix;
    identity.split = split;
    if (split_string) {
      identity.split_string = split_string;
      identity.split_matrix = data::split_matrix(data::parse_split(*split_string));
    }
    identity.tokenizer = {"_BertWordPieceTokenizer",
                          {kBertVocab},
                          {{"lower_case", "True"}, {"vocab_extra_ids", "0"}}};
    return data::bert_cache_files(data::default_bert_cache_dir(prefix),
                                  data::bert_description(identity, options_, num_samples))
        .sample_index;
  }

 private:
  std::unique_ptr<Tokenizer> tokenizer_;
  data::TokenizerVocabulary vocabulary_;
  data::BertSampleOptions options_;
};

// Megatron's BlendedDataset order, written out independently of the core: sample t comes from the
// dataset with the largest w_d * max(t, 1) - (samples it gave so far), the first one on a tie;
// each pair is (dataset, sample of that dataset). `weights` are used as given (normalised).
std::vector<std::pair<std::size_t, std::int64_t>> greedy_order(const std::vector<double>& weights,
                                                               std::int64_t size) {
  std::vector<std::int64_t> taken(weights.size(), 0);
  std::vector<std::pair<std::size_t, std::int64_t>> order;
  for (std::int64_t t = 0; t < size; ++t) {
    const double position = t > 0 ? static_cast<double>(t) : 1.0;
    std::size_t best = 0;
    for (std::size_t d = 1; d < weights.size(); ++d) {
      if (weights[d] * position - static_cast<double>(taken[d]) >
          weights[best] * position - static_cast<double>(taken[best])) {
        best = d;
      }
    }
    order.emplace_back(best, taken[best]++);
  }
  return order;
}

std::vector<double> normalized(const std::vector<double>& weights) {
  double sum = 0.0;
  for (double w : weights)
    sum += w;
  std::vector<double> out;
  for (double w : weights)
    out.push_back(w / sum);
  return out;
}

class BertBlendTest : public DatasetPluginTest {
 protected:
  BertBlendTest() : DatasetPluginTest("bert") {}
};

TEST_F(BertBlendTest, WeightedBlendServesEachConstituentsSamplesInGreedyOrder) {
  const std::string a = write_sentences(dir_.prefix("a"), 40, 2000, 1);
  const std::string b = write_sentences(dir_.prefix("b"), 60, 5000, 2);
  auto blend = create(bert_table("data_path = " + toml_list({"0.3", quoted(a), "0.7", quoted(b)}) +
                                 "\nsplit = \"100,0,0\""));
  blend->build({50, 0, 0});
  // The blend holds ceil(50 x 0.3) + ceil(50 x 0.7) = 15 + 35 samples; each constituent is built
  // for its share plus the 0.5% surplus: ceil(15 x 1.005) = 16 and ceil(35 x 1.005) = 36.
  ASSERT_EQ(blend->size(Split::kTrain), 50);
  expect_mentions(take_log(), {"train split: a blend of 2 datasets, 50 samples"});
  const std::array<std::int64_t, 2> requested = {16, 36};

  // Each constituent alone: the same options and the samples the blend asked of it, with its own
  // cache folder so that it is built afresh rather than loaded from the blend's files.
  const CoreBert core;
  std::vector<std::unique_ptr<Dataset>> alone;
  for (std::size_t d = 0; d < 2; ++d) {
    const std::string prefix = d == 0 ? a : b;
    alone.push_back(create(bert_table(
        "data_path = [" + quoted(prefix) +
        "]\nsplit = \"100,0,0\"\ndata_cache_path = " + quoted((dir_.path() / "alone").string()))));
    alone.back()->build({requested[d], 0, 0});
    expect_mentions(take_log(),
                    {"built the sample index into " + (dir_.path() / "alone").string()});
    // The blend's constituent kept Megatron's own cache files for this dataset.
    EXPECT_TRUE(fs::exists(core.cached_mapping(prefix, Split::kTrain, "100,0,0", requested[d])))
        << prefix;
  }

  // Megatron's BlendedDataset normalises the builder's normalised weights once more.
  const auto order = greedy_order(normalized(normalized({0.3, 0.7})), 50);
  std::array<std::int64_t, 2> drawn{};
  for (std::int64_t t = 0; t < 50; ++t) {
    const auto [d, item] = order[static_cast<std::size_t>(t)];
    ++drawn[d];
    EXPECT_EQ(plugin_sample(*blend, Split::kTrain, t),
              plugin_sample(*alone[d], Split::kTrain, item))
        << "blend sample " << t << " should be sample " << item << " of dataset " << d;
  }
  EXPECT_EQ(drawn[0], 15);
  EXPECT_EQ(drawn[1], 35);
  // The two datasets' samples differ (their tokens do), so the order above is really checked.
  EXPECT_NE(plugin_sample(*alone[0], Split::kTrain, 0).text,
            plugin_sample(*alone[1], Split::kTrain, 0).text);
}

// mid_level_dataset_surplus sets how much more each constituent is built for than its share.
TEST_F(BertBlendTest, SurplusSetsTheConstituentsSampleCounts) {
  const std::string a = write_sentences(dir_.prefix("a"), 40, 2000, 1);
  const std::string b = write_sentences(dir_.prefix("b"), 60, 5000, 2);
  auto blend = create(bert_table("data_path = " + toml_list({"0.3", quoted(a), "0.7", quoted(b)}) +
                                 "\nsplit = \"100,0,0\"\nmid_level_dataset_surplus = 0.5"));
  blend->build({50, 0, 0});
  // ceil(15 x 1.5) = 23 and ceil(35 x 1.5) = 53 (not 16 and 36 as with the default 0.005).
  const CoreBert core;
  EXPECT_TRUE(fs::exists(core.cached_mapping(a, Split::kTrain, "100,0,0", 23)));
  EXPECT_TRUE(fs::exists(core.cached_mapping(b, Split::kTrain, "100,0,0", 53)));
  EXPECT_FALSE(fs::exists(core.cached_mapping(a, Split::kTrain, "100,0,0", 16)));
}

TEST_F(BertBlendTest, UnweightedBlendUsesOneEpochOfEachWeighedByLength) {
  const std::string a = write_sentences(dir_.prefix("a"), 30, 2000, 3);
  const std::string b = write_sentences(dir_.prefix("b"), 15, 5000, 4);
  const std::string keys =
      "data_path = " + toml_list({quoted(a), quoted(b)}) + "\nsplit = \"100,0,0\"";
  auto blend = create(bert_table(keys));
  blend->build({30, 0, 0});

  // Without weights every constituent is built for one epoch (num_samples None) and the blend is
  // weighed by their lengths: min(30, their sum) samples.
  const CoreBert core;
  std::vector<IndexedDataset> sources;
  sources.emplace_back(a);
  sources.emplace_back(b);
  std::vector<data::IndexArray> mappings;
  std::vector<double> lengths;
  for (std::size_t d = 0; d < 2; ++d) {
    mappings.push_back(core.mapping(sources[d], std::nullopt));
    lengths.push_back(static_cast<double>(mappings.back().rows()));
    EXPECT_TRUE(
        fs::exists(core.cached_mapping(d == 0 ? a : b, Split::kTrain, "100,0,0", std::nullopt)))
        << "cache of dataset " << d << ", described with num_samples null";
  }
  ASSERT_GT(lengths[0] + lengths[1], 30.0);
  ASSERT_EQ(blend->size(Split::kTrain), 30);
  const auto order = greedy_order(normalized(lengths), 30);
  for (std::int64_t t = 0; t < 30; ++t) {
    const auto [d, item] = order[static_cast<std::size_t>(t)];
    EXPECT_EQ(plugin_sample(*blend, Split::kTrain, t), core.sample(sources[d], mappings[d], item))
        << "blend sample " << t << " should be sample " << item << " of dataset " << d;
  }

  // More than one epoch of each is refused: without weights nothing repeats.
  auto too_big = create(bert_table(keys));
  expect_mentions(error_of([&] {
                    too_big->build({100000, 0, 0});
                  }),
                  {"data.data_path", "give weights"});
}

TEST_F(BertBlendTest, PerSplitPathsBuildEachSplitFromItsOwnData) {
  const std::string a = write_sentences(dir_.prefix("a"), 30, 2000, 5);
  const std::string b = write_sentences(dir_.prefix("b"), 20, 5000, 6);
  auto dataset = create(bert_table("train_data_path = [" + quoted(a) + "]\nvalid_data_path = " +
                                   toml_list({"0.5", quoted(a), "0.5", quoted(b)})));
  dataset->build({30, 20, 5});
  EXPECT_EQ(dataset->size(Split::kTest), 0);  // no test_data_path: Megatron builds none
  expect_mentions(take_log(), {"test split has no data (no test_data_path)",
                               "valid split: a blend of 2 datasets, 20 samples"});

  // Train: dataset a alone over all its documents, asked for 30 samples; its cache is described
  // without a split string or matrix, as Megatron describes per-split datasets.
  const CoreBert core;
  const IndexedDataset source_a(a), source_b(b);
  const data::IndexArray train = core.mapping(source_a, 30);
  ASSERT_EQ(dataset->size(Split::kTrain), static_cast<std::int64_t>(train.rows()));
  for (std::int64_t k = 0; k < dataset->size(Split::kTrain); ++k)
    EXPECT_EQ(plugin_sample(*dataset, Split::kTrain, k), core.sample(source_a, train, k))
        << "train sample " << k;
  EXPECT_TRUE(fs::exists(core.cached_mapping(a, Split::kTrain, std::nullopt, 30)));

  // Valid: ceil(20 x 0.5) samples of each, both built for ceil(10 x 1.005) = 11.
  ASSERT_EQ(dataset->size(Split::kValid), 20);
  const std::array<data::IndexArray, 2> valid = {core.mapping(source_a, 11),
                                                 core.mapping(source_b, 11)};
  const auto order = greedy_order(normalized(normalized({0.5, 0.5})), 20);
  for (std::int64_t t = 0; t < 20; ++t) {
    const auto [d, item] = order[static_cast<std::size_t>(t)];
    EXPECT_EQ(plugin_sample(*dataset, Split::kValid, t),
              core.sample(d == 0 ? source_a : source_b, valid[d], item))
        << "valid sample " << t;
  }
  EXPECT_TRUE(fs::exists(core.cached_mapping(b, Split::kValid, std::nullopt, 11)));
}

TEST_F(BertBlendTest, BadBlendsAreRefusedNamingTheKey) {
  const std::string a = write_sentences(dir_.prefix("a"), 10, 2000, 7);
  const std::string b = write_sentences(dir_.prefix("b"), 10, 5000, 8);
  const std::string missing = dir_.prefix("nope");
  expect_mentions(error_of([&] {
                    create(bert_table("data_path = " + toml_list({quoted(a), quoted(missing)})));
                  }),
                  {"test.toml:3:", "data.data_path", missing + ".idx", "does not exist",
                   "preprocess --split-sentences"});
  expect_mentions(
      error_of([&] {
        create(bert_table("data_path = " + toml_list({"1", quoted(a), "2", quoted(missing)})));
      }),
      {"data.data_path", missing + ".idx"});
  expect_mentions(error_of([&] {
                    create(bert_table("train_data_path = [" + quoted(a) + "]\nvalid_data_path = " +
                                      toml_list({quoted(b), quoted(missing)})));
                  }),
                  {"data.valid_data_path", missing + ".idx"});
  expect_mentions(
      error_of([&] {
        create(bert_table("data_path = " + toml_list({"-1", quoted(a), "2", quoted(b)})));
      }),
      {"test.toml:3:", "data.data_path", "weight -1", "> 0"});
  expect_mentions(error_of([&] {
                    create(bert_table("data_path = [" + quoted(a) + "]\ntrain_data_path = [" +
                                      quoted(b) + "]"));
                  }),
                  {"data.train_data_path", "cannot be combined"});
  expect_mentions(error_of([&] {
                    create(bert_table("train_data_path = [" + quoted(a) + "]\nsplit = \"1,1,1\""));
                  }),
                  {"data.split", "per-split paths"});
  const std::string documents = write_documents(dir_.prefix("documents"), 10);
  expect_mentions(error_of([&] {
                    create(bert_table("data_path = " + toml_list({quoted(a), quoted(documents)})));
                  }),
                  {"data.data_path", documents, "one sequence per document"});
}

TEST_F(BertBlendTest, ASplitWithoutDocumentsIsAnErrorInABlendAndLeftEmptyAlone) {
  // Three documents: "98,1,1" gives valid round(0.98 x 3) .. round(0.99 x 3) = [3, 3).
  const std::string tiny = write_sentences(dir_.prefix("tiny"), 3, 2000, 9);
  const std::string b = write_sentences(dir_.prefix("b"), 30, 5000, 10);
  auto blend = create(bert_table("data_path = " + toml_list({"1", quoted(tiny), "1", quoted(b)}) +
                                 "\nsplit = \"98,1,1\""));
  expect_mentions(error_of([&] {
                    blend->build({10, 4, 0});
                  }),
                  {"data.data_path", "valid split of " + tiny + " has no documents",
                   "split \"98,1,1\" gives it documents [3, 3) of 3"});
  // A dataset on its own leaves such a valid split empty, with a warning.
  auto alone = create(bert_table("data_path = [" + quoted(tiny) + "]\nsplit = \"98,1,1\""));
  take_log();
  alone->build({10, 4, 0});
  EXPECT_EQ(alone->size(Split::kValid), 0);
  EXPECT_GE(alone->size(Split::kTrain), 10);
  expect_mentions(take_log(), {"valid split of " + tiny + " has no documents", "left empty"});
}

}  // namespace
}  // namespace megatron::test
