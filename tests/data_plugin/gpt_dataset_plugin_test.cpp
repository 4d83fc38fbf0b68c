// The `gpt` dataset plugin, created through the catalog: its samples against the core index
// functions and tokens read independently, EOD and padding masks, blends in Megatron's order,
// the cache files (Megatron's names, reused), and errors that name the key and the path.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "gpt_plugin_fixture.h"
#include "megatron/data/blend.h"
#include "megatron/data/gpt_indices.h"
#include "megatron/error.h"

namespace megatron::test {
namespace {

namespace fs = std::filesystem;
using data::Split;

// Megatron's sample `item` of one GPTDataset, read piece by piece with IndexedDataset::get.
std::vector<std::int64_t> expected_text(const IndexedDataset& source,
                                        const data::GptIndices& indices, std::int64_t item) {
  const std::vector<std::int32_t> lengths = source.sequence_lengths();
  std::vector<std::int64_t> text;
  for (const data::SamplePiece& piece : indices.sample_pieces(item, lengths)) {
    const std::vector<std::int64_t> run =
        source.get(static_cast<std::size_t>(piece.sequence_id),
                   static_cast<std::size_t>(piece.offset), static_cast<std::size_t>(piece.length));
    text.insert(text.end(), run.begin(), run.end());
  }
  return text;
}

// The split's sequence ids under `split`, as Megatron's builder computes them.
std::vector<std::int32_t> split_ids(const std::string& split, Split which, std::int64_t sequences) {
  const data::SplitMatrix matrix = data::split_matrix(data::parse_split(split));
  const data::ElementRange range =
      data::split_element_range(*matrix[static_cast<std::size_t>(which)], sequences);
  std::vector<std::int32_t> ids;
  for (std::int64_t i = range.begin; i < range.end; ++i)
    ids.push_back(static_cast<std::int32_t>(i));
  return ids;
}

data::GptIndexOptions index_options(std::int64_t seq_length, std::optional<std::int64_t> samples,
                                    std::int64_t seed = 1234) {
  data::GptIndexOptions o;
  o.sequence_length = seq_length;
  o.num_samples = samples;
  o.seed = seed;
  return o;
}

void expect_sample(const Sample& got, const std::vector<std::int64_t>& text, std::size_t seq,
                   const std::string& what) {
  ASSERT_EQ(text.size(), seq + 1) << what;
  for (std::size_t i = 0; i < seq; ++i) {
    ASSERT_EQ(got.tokens[i], text[i]) << what << " token " << i;
    ASSERT_EQ(got.labels[i], text[i + 1]) << what << " label " << i;
  }
}

TEST_F(GptPluginTest, SamplesArePiecesOfMegatronsIndicesShiftedByOne) {
  const std::string prefix = write_dataset(dir_.prefix("corpus"), 40, 5, 70, 100, 1);
  auto dataset = create("[training]\nseed = 77\n" +
                        gpt_table("[" + quoted(prefix) + "]", 16, "split = \"80,15,5\"\n"));
  const std::array<std::int64_t, 3> wanted = {120, 30, 6};
  dataset->build(wanted);
  EXPECT_EQ(dataset->seq_length(), 16);
  EXPECT_EQ(dataset->tokenizer().eod(), kEod);

  const IndexedDataset source(prefix);
  const std::vector<std::int32_t> lengths = source.sequence_lengths();
  for (Split split : data::kSplits) {
    const auto ids = split_ids("80,15,5", split, static_cast<std::int64_t>(lengths.size()));
    const data::GptIndices indices = data::build_gpt_indices(
        ids, lengths, index_options(16, wanted[static_cast<std::size_t>(split)], 77));
    ASSERT_EQ(dataset->size(split), indices.size());
    EXPECT_GE(dataset->size(split), wanted[static_cast<std::size_t>(split)]);
    for (std::int64_t k = 0; k < indices.size(); ++k) {
      const Sample got = get_sample(*dataset, split, k);
      expect_sample(got, expected_text(source, indices, k), 16,
                    std::string(data::split_name(split)) + " sample " + std::to_string(k));
      EXPECT_TRUE(std::all_of(got.loss_mask.begin(), got.loss_mask.end(),
                              [](float m) { return m == 1.0f; }));
    }
  }
  EXPECT_THROW(get_sample(*dataset, Split::kTrain, dataset->size(Split::kTrain)), Error);
}

TEST_F(GptPluginTest, EodMaskLossMasksPositionsWhoseInputIsEod) {
  const std::string prefix = write_dataset(dir_.prefix("corpus"), 30, 3, 12, 100, 2);
  auto dataset =
      create(gpt_table("[" + quoted(prefix) + "]", 32, "split = \"1\"\neod_mask_loss = true\n"));
  dataset->build({40, 0, 0});
  EXPECT_EQ(dataset->size(Split::kValid), 0);
  std::int64_t eod_inputs = 0, eod_labels_kept = 0;
  for (std::int64_t k = 0; k < dataset->size(Split::kTrain); ++k) {
    const Sample s = get_sample(*dataset, Split::kTrain, k);
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
      // _get_ltor_masks_and_position_ids masks where the *input* token is EOD.
      EXPECT_EQ(s.loss_mask[i], s.tokens[i] == kEod ? 0.0f : 1.0f) << "sample " << k << " " << i;
      eod_inputs += s.tokens[i] == kEod;
      eod_labels_kept += s.labels[i] == kEod && s.tokens[i] != kEod;
    }
  }
  EXPECT_GT(eod_inputs, 10);
  EXPECT_GT(eod_labels_kept, 10);  // predicting EOD still counts
}

// _get_ltor_masks_and_position_ids written as Megatron's loop over EOD positions, on a dense
// (s, s) mask (true = masked after its `< 0.5`), for the fields' reference.
struct LtorMasks {
  std::vector<std::vector<bool>> masked;
  std::vector<std::int64_t> position_ids;
};
LtorMasks megatron_ltor_masks(const std::vector<std::int32_t>& tokens, bool reset_positions,
                              bool reset_attention) {
  const std::size_t s = tokens.size();
  std::vector<std::vector<double>> mask(s, std::vector<double>(s, 0.0));
  for (std::size_t i = 0; i < s; ++i)
    for (std::size_t j = 0; j <= i; ++j)
      mask[i][j] = 1.0;  // torch.tril(ones)
  LtorMasks out;
  for (std::size_t i = 0; i < s; ++i)
    out.position_ids.push_back(static_cast<std::int64_t>(i));
  std::vector<std::size_t> eod_index;
  for (std::size_t i = 0; i < s; ++i)
    if (tokens[i] == kEod) eod_index.push_back(i);
  std::size_t prev_index = 0;
  for (std::size_t i : eod_index) {
    if (reset_attention) {
      for (std::size_t r = i + 1; r < s; ++r)
        for (std::size_t c = 0; c < i + 1; ++c)
          mask[r][c] = 0.0;
    }
    if (reset_positions) {
      for (std::size_t r = i + 1; r < s; ++r)
        out.position_ids[r] -= static_cast<std::int64_t>(i + 1 - prev_index);
      prev_index = i + 1;
    }
  }
  out.masked.assign(s, std::vector<bool>(s));
  for (std::size_t i = 0; i < s; ++i)
    for (std::size_t j = 0; j < s; ++j)
      out.masked[i][j] = mask[i][j] < 0.5;
  return out;
}

TEST_F(GptPluginTest, ResetPositionIdsAndAttentionMaskAreMegatronsMasksAsFields) {
  const std::string prefix = write_dataset(dir_.prefix("corpus"), 30, 2, 9, 100, 3);
  const std::string table = "[" + quoted(prefix) + "]";
  auto plain = create(gpt_table(table, 32, "split = \"1\"\n"));
  for (const FieldSpec& f : plain->sample_fields()) {
    EXPECT_NE(f.name, "position_ids");  // only when asked for
    EXPECT_NE(f.name, "attention_mask");
  }
  for (const auto& [positions, attention] :
       {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
    SCOPED_TRACE(std::string("reset_position_ids ") + (positions ? "on" : "off") +
                 ", reset_attention_mask " + (attention ? "on" : "off"));
    auto dataset = create(gpt_table(
        table, 32,
        "split = \"1\"\nreset_position_ids = " + std::string(positions ? "true" : "false") +
            "\nreset_attention_mask = " + std::string(attention ? "true" : "false") + "\n"));
    const SampleSpec spec = dataset->sample_fields();
    EXPECT_EQ(find_field(spec, "position_ids") != nullptr, positions);
    EXPECT_EQ(find_field(spec, "attention_mask") != nullptr, attention);
    dataset->build({40, 0, 0});
    std::int64_t restarts = 0;
    for (std::int64_t k = 0; k < dataset->size(Split::kTrain); ++k) {
      Batch batch = Batch::allocate(spec, 1);
      dataset->get(Split::kTrain, k, batch.sample(0));
      const auto tokens = field_values<std::int32_t>(batch, "tokens", 32);
      const LtorMasks want = megatron_ltor_masks(tokens, positions, attention);
      if (positions) {
        const auto got = field_values<std::int32_t>(batch, "position_ids", 32);
        for (std::size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i], want.position_ids[i]) << "sample " << k << " position " << i;
          restarts += i > 0 && got[i] == 0;
        }
      }
      if (attention) {
        const auto first = field_values<std::int32_t>(batch, "attention_mask", 32);
        for (std::size_t i = 0; i < first.size(); ++i) {
          for (std::size_t j = 0; j < first.size(); ++j) {
            const bool masked = j > i || static_cast<std::int32_t>(j) < first[i];
            ASSERT_EQ(masked, want.masked[i][j])
                << "sample " << k << " query " << i << " key " << j;
          }
        }
      }
    }
    if (positions) {
      EXPECT_GT(restarts, 20);  // documents of 2..9 tokens: many boundaries
    }
  }
}

TEST_F(GptPluginTest, KeptLastPartialValidSampleIsPaddedAndMasked) {
  // 12 sequences of 10 tokens, valid = the last 6: 60 tokens, (60 - 1) % 8 != 0.
  IndexedDatasetWriter writer(bin_path(dir_.prefix("even")), IndexDType::u16);
  for (std::int32_t d = 0; d < 12; ++d) {
    std::vector<std::int32_t> tokens;
    for (std::int32_t i = 0; i < 10; ++i)
      tokens.push_back(1000 + d * 10 + i);
    writer.add_item(std::span<const std::int32_t>(tokens));
    writer.end_document();
  }
  writer.finalize(idx_path(dir_.prefix("even")));
  const std::string prefix = dir_.prefix("even");
  auto dataset = create(gpt_table("[" + quoted(prefix) + "]", 8,
                                  "split = \"1,1,0\"\ndrop_last_partial_validation_sequence = "
                                  "false\n"));
  dataset->build({4, 7, 0});
  const IndexedDataset source(prefix);
  const data::GptIndices indices =
      data::build_gpt_indices(split_ids("1,1,0", Split::kValid, 12), source.sequence_lengths(), [] {
        auto o = index_options(8, 7);
        o.drop_last_partial_sequence = false;
        return o;
      }());
  ASSERT_EQ(dataset->size(Split::kValid), indices.size());
  int padded_samples = 0;
  for (std::int64_t k = 0; k < indices.size(); ++k) {
    const std::vector<std::int64_t> text = expected_text(source, indices, k);
    const Sample s = get_sample(*dataset, Split::kValid, k);
    for (std::size_t i = 0; i < 8; ++i) {
      const bool input_real = i < text.size();
      const bool label_real = i + 1 < text.size();
      EXPECT_EQ(s.tokens[i], input_real ? text[i] : 0) << k << " " << i;
      EXPECT_EQ(s.labels[i], label_real ? text[i + 1] : 0) << k << " " << i;
      EXPECT_EQ(s.loss_mask[i], label_real ? 1.0f : 0.0f) << k << " " << i;
    }
    padded_samples += text.size() < 9;
  }
  EXPECT_EQ(padded_samples, 1);
}

TEST_F(GptPluginTest, SentencePieceTokenizersPadAndCacheIdentityAreMegatrons) {
  // One document of 40 tokens with SentencePieceTokenizer's <PAD> (8004 with data/austen_spm.model)
  // at 5 and 20: GPTDataset takes tokenizer.pad as its pad id, so those labels are masked and the
  // ids become 0, as for the padding of a short sample. GPTSentencePieceTokenizer has no pad
  // (pad_id -1), so there 8004 is an ordinary id.
  IndexedDatasetWriter writer(bin_path(dir_.prefix("spm")), IndexDType::u16);
  std::vector<std::int32_t> tokens;
  for (std::int32_t i = 0; i < 40; ++i)
    tokens.push_back(i == 5 || i == 20 ? 8004 : 100 + i);
  writer.add_item(std::span<const std::int32_t>(tokens));
  writer.end_document();
  writer.finalize(idx_path(dir_.prefix("spm")));
  const std::string prefix = dir_.prefix("spm");
  const std::string model = std::string(DATA_DIR) + "/austen_spm.model";
  for (const std::string type : {"SentencePieceTokenizer", "GPTSentencePieceTokenizer"}) {
    SCOPED_TRACE(type);
    const fs::path cache = dir_.path() / ("cache_" + type);
    auto dataset = create(gpt_table("[" + quoted(prefix) + "]", 8,
                                    "split = \"1\"\ntokenizer_type = \"" + type +
                                        "\"\ntokenizer_model = " + quoted(model) +
                                        "\ndata_cache_path = " + quoted(cache.string()) + "\n"));
    dataset->build({4, 0, 0});
    const bool pad = type == "SentencePieceTokenizer";
    int masked = 0;
    for (std::int64_t k = 0; k < dataset->size(Split::kTrain); ++k) {
      const Sample s = get_sample(*dataset, Split::kTrain, k);
      for (std::size_t i = 0; i < 8; ++i) {
        EXPECT_NE(s.tokens[i], pad ? 8004 : -1);
        EXPECT_NE(s.labels[i], pad ? 8004 : -1);
        masked += s.loss_mask[i] == 0.0f;
        if (s.loss_mask[i] == 0.0f) {
          EXPECT_EQ(s.labels[i], 0);
        }
      }
    }
    EXPECT_EQ(masked > 0, pad);
    // Megatron's unique_identifiers of the tokenizer: its class, the model path, vocab_extra_ids.
    std::string description;
    for (const auto& entry : fs::directory_iterator(cache)) {
      if (entry.path().string().ends_with("-train-description.txt")) {
        std::ifstream in(entry.path());
        description.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
    }
    expect_mentions(description, {"\"class\": \"_" + type + "\"", "\"tokenizer_path\": [\n",
                                  "\"" + fs::path(model).lexically_normal().string() + "\"",
                                  "\"vocab_extra_ids\": \"0\""});
  }
}

TEST_F(GptPluginTest, WeightedBlendPicksConstituentsInMegatronsOrder) {
  // Tokens of A are in [100, 1000), of B in [2000, 2900): each sample tells where it came from.
  const std::string a = write_dataset(dir_.prefix("a"), 25, 5, 40, 100, 3);
  const std::string b = write_dataset(dir_.prefix("b"), 35, 5, 40, 2000, 4);
  auto dataset = create(
      gpt_table("[0.3, " + quoted(a) + ", 0.7, " + quoted(b) + "]", 16, "split = \"100,0,0\"\n"));
  dataset->build({50, 0, 0});
  // Megatron's sizes: each constituent built for ceil(ceil(50 w) x 1.005) samples, the blend has
  // ceil(50 x 0.3) + ceil(50 x 0.7) = 15 + 35 samples in greedy minimum-error order.
  ASSERT_EQ(dataset->size(Split::kTrain), 50);
  // Worked by hand: at t pick the largest w_d x max(t, 1) - count_d (B A B B A B B A).
  const std::vector<int> first = {1, 0, 1, 1, 0, 1, 1, 0};
  const data::BlendRequest request{std::vector<double>{0.3, 0.7}, 50, 0.005};
  const auto plan = data::plan_constituent_samples(request, 2);
  EXPECT_EQ(plan[0].value(), 16);  // ceil(15 x 1.005)
  EXPECT_EQ(plan[1].value(), 36);  // ceil(35 x 1.005)

  std::vector<IndexedDataset> sources;
  sources.emplace_back(a);
  sources.emplace_back(b);
  std::vector<data::GptIndices> constituents;
  std::vector<std::int64_t> lengths;
  for (std::size_t d = 0; d < 2; ++d) {
    const auto sequences = static_cast<std::int64_t>(sources[d].size());
    constituents.push_back(data::build_gpt_indices(split_ids("100,0,0", Split::kTrain, sequences),
                                                   sources[d].sequence_lengths(),
                                                   index_options(16, plan[d])));
    lengths.push_back(constituents.back().size());
  }
  const data::Blend blend = data::build_blend(request, lengths);
  ASSERT_EQ(blend.indices.dataset_index.size(), 50u);
  for (std::size_t t = 0; t < first.size(); ++t)
    EXPECT_EQ(blend.indices.dataset_index[t], first[t]) << "blend position " << t;
  for (std::int64_t t = 0; t < 50; ++t) {
    const auto d =
        static_cast<std::size_t>(blend.indices.dataset_index[static_cast<std::size_t>(t)]);
    const std::int64_t item = blend.indices.dataset_sample_index[static_cast<std::size_t>(t)];
    const Sample s = get_sample(*dataset, Split::kTrain, t);
    expect_sample(s, expected_text(sources[d], constituents[d], item), 16,
                  "blend sample " + std::to_string(t));
    const std::int32_t first_token = d == 0 ? 100 : 2000;
    EXPECT_TRUE(s.tokens[0] == kEod ||
                (s.tokens[0] >= first_token && s.tokens[0] < first_token + 900))
        << "blend sample " << t << " should come from dataset " << d;
  }
}

TEST_F(GptPluginTest, UnweightedBlendUsesEachDatasetOnceWeighedByLength) {
  const std::string a = write_dataset(dir_.prefix("a"), 20, 5, 40, 100, 5);
  const std::string b = write_dataset(dir_.prefix("b"), 10, 5, 40, 2000, 6);
  auto dataset =
      create(gpt_table("[" + quoted(a) + ", " + quoted(b) + "]", 16, "split = \"100,0,0\"\n"));
  dataset->build({20, 0, 0});
  std::vector<std::int64_t> lengths;
  for (const std::string& prefix : {a, b}) {
    const IndexedDataset source(prefix);
    lengths.push_back(
        data::build_gpt_indices(
            split_ids("100,0,0", Split::kTrain, static_cast<std::int64_t>(source.size())),
            source.sequence_lengths(), index_options(16, std::nullopt))
            .size());
  }
  EXPECT_EQ(dataset->size(Split::kTrain), std::min<std::int64_t>(20, lengths[0] + lengths[1]));

  // Asking for more than the datasets hold once is refused: without weights nothing repeats.
  auto too_big =
      create(gpt_table("[" + quoted(a) + ", " + quoted(b) + "]", 16, "split = \"100,0,0\"\n"));
  expect_mentions(error_of([&] {
                    too_big->build({100000, 0, 0});
                  }),
                  {"data.data_path", "give weights"});
}

TEST_F(GptPluginTest, PerSplitPathsBuildEachSplitFromItsOwnData) {
  const std::string a = write_dataset(dir_.prefix("a"), 20, 5, 40, 100, 7);
  const std::string b = write_dataset(dir_.prefix("b"), 10, 5, 40, 2000, 8);
  auto dataset =
      create("[data]\ntype = \"gpt\"\ntrain_data_path = [" + quoted(a) + "]\nvalid_data_path = [" +
             quoted(b) + "]\nseq_length = 16\nvocab_file = " + quoted(kVocabFile) +
             "\nmerge_file = " + quoted(kMergeFile) + "\n");
  dataset->build({30, 10, 5});
  EXPECT_EQ(dataset->size(Split::kTest), 0);  // no test_data_path: Megatron builds none
  expect_mentions(take_log(), {"test split has no data (no test_data_path)"});
  const IndexedDataset source(b);
  const data::GptIndices indices = data::build_gpt_indices(
      split_ids("1", Split::kTrain, static_cast<std::int64_t>(source.size())),
      source.sequence_lengths(), index_options(16, 10));
  ASSERT_EQ(dataset->size(Split::kValid), indices.size());
  for (std::int64_t k = 0; k < indices.size(); ++k)
    expect_sample(get_sample(*dataset, Split::kValid, k), expected_text(source, indices, k), 16,
                  "valid sample " + std::to_string(k));

  // The cache is Megatron's: per-split datasets have no split string and no split matrix.
  data::GptDatasetIdentity identity;
  identity.dataset_path = b;
  identity.split = Split::kValid;
  identity.tokenizer = {"_GPT2BPETokenizer", {kVocabFile, kMergeFile}, {}};
  bool built = true;
  data::load_or_build_gpt_indices(data::default_gpt_cache_dir(b), identity,
                                  split_ids("1", Split::kTrain, 10), source.sequence_lengths(),
                                  index_options(16, 10), &built);
  EXPECT_FALSE(built);
}

TEST_F(GptPluginTest, CacheFilesAreMegatronsAndAreReused) {
  const std::string prefix = write_dataset(dir_.prefix("corpus"), 30, 5, 60, 100, 9);
  const std::string table = gpt_table("[" + quoted(prefix) + "]", 16);
  create(table)->build({50, 10, 0});
  expect_mentions(take_log(), {"train split of " + prefix + ": built the indices",
                               "valid split of " + prefix + ": built the indices"});
  const fs::path cache = data::default_gpt_cache_dir(prefix);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(cache))
    files.push_back(entry.path());
  EXPECT_EQ(files.size(), 8u);  // description + three .npy files, for train and valid
  std::vector<fs::file_time_type> times;
  for (const auto& f : files)
    times.push_back(fs::last_write_time(f));

  create(table)->build({50, 10, 0});
  const std::string second = take_log();
  expect_mentions(second, {"train split of " + prefix + ": loaded the indices",
                           "valid split of " + prefix + ": loaded the indices"});
  EXPECT_EQ(second.find("built"), std::string::npos) << second;
  for (std::size_t i = 0; i < files.size(); ++i)
    EXPECT_EQ(fs::last_write_time(files[i]), times[i]) << files[i];

  // The files are the ones Megatron would look for: its description of this dataset finds them.
  const IndexedDataset source(prefix);
  data::GptDatasetIdentity identity;
  identity.dataset_path = prefix;
  identity.split = Split::kTrain;
  identity.split_string = std::string(data::kDefaultSplit);
  identity.split_matrix = data::split_matrix(data::parse_split(data::kDefaultSplit));
  identity.tokenizer = {"_GPT2BPETokenizer", {kVocabFile, kMergeFile}, {}};
  bool built = true;
  data::load_or_build_gpt_indices(cache, identity, split_ids("969, 30, 1", Split::kTrain, 30),
                                  source.sequence_lengths(), index_options(16, 50), &built);
  EXPECT_FALSE(built);
}

TEST_F(GptPluginTest, DataCachePathHoldsTheCacheWhenGiven) {
  const std::string prefix = write_dataset(dir_.prefix("corpus"), 30, 5, 60, 100, 10);
  const fs::path cache = dir_.path() / "my_cache";
  create(gpt_table("[" + quoted(prefix) + "]", 16,
                   "data_cache_path = " + quoted(cache.string()) + "\n"))
      ->build({50, 0, 0});
  EXPECT_EQ(std::distance(fs::directory_iterator(cache), fs::directory_iterator()), 4);
  EXPECT_FALSE(fs::exists(data::default_gpt_cache_dir(prefix)));
}

TEST_F(GptPluginTest, MissingPrefixIsRefusedNamingTheFileAndKey) {
  const std::string missing = dir_.prefix("nope");
  const std::string message = error_of([&] { create(gpt_table("[" + quoted(missing) + "]", 16)); });
  expect_mentions(message, {"test.toml:3:", "data.data_path", missing + ".idx", "does not exist"});
  const std::string a = write_dataset(dir_.prefix("a"), 5, 5, 10, 100, 11);
  expect_mentions(error_of([&] {
                    create(gpt_table("[1, " + quoted(a) + ", 2, " + quoted(missing) + "]", 16));
                  }),
                  {"data.data_path", missing + ".idx"});
}

TEST_F(GptPluginTest, BadKeysAreRefusedWithTheirLocation) {
  const std::string a = write_dataset(dir_.prefix("a"), 5, 5, 10, 100, 12);
  const std::string path = "[" + quoted(a) + "]";
  expect_mentions(error_of([&] { create(gpt_table(path, 0)); }),
                  {"test.toml:4:", "data.seq_length", "out of range"});
  expect_mentions(error_of([&] { create(gpt_table(path, -3)); }), {"data.seq_length"});
  expect_mentions(error_of([&] { create("[data]\ntype = \"gpt\"\ndata_path = " + path + "\n"); }),
                  {"data.seq_length", "required key is missing"});
  expect_mentions(error_of([&] {
                    create("[data]\ntype = \"gpt\"\nseq_length = 8\nvocab_file = " +
                           quoted(kVocabFile) + "\nmerge_file = " + quoted(kMergeFile) + "\n");
                  }),
                  {"data.data_path", "required key is missing"});
  expect_mentions(error_of([&] {
                    create("[data]\ntype = \"gpt\"\ndata_path = " + path + "\nseq_length = 8\n");
                  }),
                  {"data.vocab_file", "GPT2BPETokenizer needs it"});
  expect_mentions(error_of([&] { create(gpt_table(path, 8, "split = \"1,2,3,4\"\n")); }),
                  {"data.split", "4 weights"});
  expect_mentions(error_of([&] { create(gpt_table(path, 8, "train_data_path = " + path + "\n")); }),
                  {"data.train_data_path", "cannot be combined"});
  expect_mentions(error_of([&] {
                    create("[data]\ntype = \"gpt\"\ntrain_data_path = " + path +
                           "\nsplit = \"1,1,1\"\nseq_length = 8\n");
                  }),
                  {"data.split", "per-split paths"});
  expect_mentions(error_of([&] { create(gpt_table(path, 8, "tokenizer_type = \"Nope\"\n")); }),
                  {"data.tokenizer_type", "unknown tokenizer type 'Nope'"});
}

TEST_F(GptPluginTest, SplitAskedForSamplesButEmptyIsAClearError) {
  // Three sequences: "98,1,1" gives valid round(0.98 x 3) .. round(0.99 x 3) = [3, 3).
  const std::string a = write_dataset(dir_.prefix("a"), 3, 20, 30, 100, 13);
  auto dataset = create(gpt_table("[" + quoted(a) + "]", 8, "split = \"98,1,1\"\n"));
  expect_mentions(error_of([&] {
                    dataset->build({10, 4, 0});
                  }),
                  {"data.data_path", "valid split of " + a + " is empty",
                   "split \"98,1,1\" gives it sequences [3, 3) of 3"});
  // Not asked for: not built, no error.
  auto unused = create(gpt_table("[" + quoted(a) + "]", 8, "split = \"98,1,1\"\n"));
  unused->build({10, 0, 0});
  EXPECT_EQ(unused->size(Split::kValid), 0);
  EXPECT_GE(unused->size(Split::kTrain), 10);
  // A train split without data cannot be trained on; valid and test are only left empty.
  auto no_train = create(gpt_table("[" + quoted(a) + "]", 8, "split = \"0,1,0\"\n"));
  expect_mentions(error_of([&] {
                    no_train->build({10, 4, 0});
                  }),
                  {"data.split", "the train split has no data (zero weight in split \"0,1,0\")",
                   "trains on 10 samples"});
  auto only_valid = create("[data]\ntype = \"gpt\"\nvalid_data_path = [" + quoted(a) +
                           "]\nseq_length = 8\nvocab_file = " + quoted(kVocabFile) +
                           "\nmerge_file = " + quoted(kMergeFile) + "\n");
  expect_mentions(error_of([&] {
                    only_valid->build({10, 4, 0});
                  }),
                  {"data.train_data_path", "no train_data_path"});
  only_valid->build({0, 4, 4});
  EXPECT_GE(only_valid->size(Split::kValid), 4);
  EXPECT_EQ(only_valid->size(Split::kTest), 0);
}

}  // namespace
}  // namespace megatron::test
