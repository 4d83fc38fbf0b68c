// Hand-checked cases of the masked-dataset code: mapping rows of a small dataset, the two-sentence
// pivot, truncation, layout and padding of BERT samples, masking invariants, the cache files, and
// the errors. (bert_samples_reference.py compares thousands of samples with Python.)
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "data_indices/expect_error.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/data/masked_samples.h"
#include "megatron/data/numpy_random.h"

namespace megatron::data {
namespace {

using Rows = std::vector<std::array<std::int64_t, 3>>;

Rows sorted_rows(const IndexArray& mapping) {
  Rows rows;
  for (std::size_t r = 0; r < mapping.rows(); ++r)
    rows.push_back({mapping.at(r, 0), mapping.at(r, 1), mapping.at(r, 2)});
  std::sort(rows.begin(), rows.end());
  return rows;
}

// Documents: [5, 5, 5, 5], [3], [600, 3], [3, 3, 3], [], [530].
const std::vector<std::int64_t> kDocuments = {0, 4, 5, 7, 10, 10, 11};
const std::vector<std::int32_t> kLengths = {5, 5, 5, 5, 3, 600, 3, 3, 3, 3, 530};

SampleMappingOptions fixed_targets(std::int32_t min_num_sent) {
  SampleMappingOptions options;
  options.max_seq_length = 9;
  options.short_seq_prob = 0.0;  // every target is 9, no draw
  options.min_num_sent = min_num_sent;
  return options;
}

TEST(SampleMapping, RowsCloseAtTheTargetKeepingASentenceBackOrAtTheDocumentEnd) {
  // With two sentences per row: [5 5 | 5 5] closes after 10 >= 9 tokens with two sentences left;
  // [3] is too short, [600, 3] holds a long sentence, [3 3 3] never reaches 9 before its end,
  // and [530] is a single sentence.
  const IndexArray two = build_sample_mapping(kDocuments, 0, 6, kLengths, fixed_targets(2));
  EXPECT_EQ(two.dtype(), IndexDtype::kUInt32);
  EXPECT_EQ(sorted_rows(two), (Rows{{0, 2, 9}, {2, 4, 9}, {7, 10, 9}}));

  // With one: [3] and the lone 530-token sentence become rows (only documents of two or more
  // sentences are checked for long sentences); [600, 3] is still skipped.
  const IndexArray one = build_sample_mapping(kDocuments, 0, 6, kLengths, fixed_targets(1));
  EXPECT_EQ(sorted_rows(one), (Rows{{0, 2, 9}, {2, 4, 9}, {4, 5, 9}, {7, 10, 9}, {10, 11, 9}}));

  // A document range uses absolute sentence numbers.
  EXPECT_EQ(sorted_rows(build_sample_mapping(kDocuments, 3, 5, kLengths, fixed_targets(1))),
            (Rows{{7, 10, 9}}));
}

TEST(SampleMapping, NumSamplesRepeatsWholeEpochs) {
  SampleMappingOptions options = fixed_targets(2);
  options.num_samples = 4;  // 3 rows per epoch: the second epoch starts at 3 < 4 and completes
  EXPECT_EQ(build_sample_mapping(kDocuments, 0, 6, kLengths, options).rows(), 6u);
  options.num_samples = 6;
  EXPECT_EQ(build_sample_mapping(kDocuments, 0, 6, kLengths, options).rows(), 6u);
  options.num_samples = 7;
  EXPECT_EQ(build_sample_mapping(kDocuments, 0, 6, kLengths, options).rows(), 9u);
  options.num_samples = 0;
  EXPECT_EQ(build_sample_mapping(kDocuments, 0, 6, kLengths, options).rows(), 0u);
}

TEST(SampleMapping, ShortTargetsAreInRangeAndTheShuffleKeepsRows) {
  std::vector<std::int64_t> documents = {0};
  std::vector<std::int32_t> lengths;
  for (int d = 0; d < 200; ++d) {
    for (int s = 0; s < 6; ++s)
      lengths.push_back(3 + (d * 7 + s * 5) % 20);
    documents.push_back(static_cast<std::int64_t>(lengths.size()));
  }
  SampleMappingOptions options;
  options.max_seq_length = 40;
  options.short_seq_prob = 0.5;
  options.min_num_sent = 2;
  const IndexArray mapping = build_sample_mapping(documents, 0, 200, lengths, options);
  std::set<std::int64_t> targets;
  std::vector<int> covered(lengths.size(), 0);
  for (std::size_t r = 0; r < mapping.rows(); ++r) {
    targets.insert(mapping.at(r, 2));
    for (std::int64_t s = mapping.at(r, 0); s < mapping.at(r, 1); ++s)
      ++covered[static_cast<std::size_t>(s)];
  }
  EXPECT_GE(*targets.begin(), 2);
  EXPECT_EQ(*targets.rbegin(), 40);
  EXPECT_GT(targets.size(), 10u);  // short targets drawn
  // One epoch covers every sentence exactly once.
  EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));
  // Shuffled: not in document order.
  Rows in_order;
  for (std::size_t r = 0; r < mapping.rows(); ++r)
    in_order.push_back({mapping.at(r, 0), mapping.at(r, 1), mapping.at(r, 2)});
  EXPECT_NE(in_order, sorted_rows(mapping));
}

TEST(SampleMapping, RefusesWhatMegatronAssertsOrLoopsOn) {
  SampleMappingOptions options = fixed_targets(2);
  options.num_samples = 10;
  const std::vector<std::int64_t> single = {0, 1, 2};
  const std::vector<std::int32_t> lengths = {4, 4};
  EXPECT_ERROR_MENTIONING(build_sample_mapping(single, 0, 2, lengths, options),
                          "none of documents [0, 2) yields a sample", "--split-sentences");
  options.seed = 0;
  EXPECT_ERROR_MENTIONING(build_sample_mapping(kDocuments, 0, 6, kLengths, options), "random seed",
                          "found 0");
  options = fixed_targets(2);
  options.max_seq_length = 1;
  EXPECT_ERROR_MENTIONING(build_sample_mapping(kDocuments, 0, 6, kLengths, options),
                          "at least 2, found 1");
  options = fixed_targets(2);
  options.short_seq_prob = 1.5;
  EXPECT_ERROR_MENTIONING(build_sample_mapping(kDocuments, 0, 6, kLengths, options),
                          "short_seq_prob");
  EXPECT_ERROR_MENTIONING(build_sample_mapping(kDocuments, 2, 2, kLengths, fixed_targets(2)),
                          "[2, 2) is empty");
  EXPECT_ERROR_MENTIONING(build_sample_mapping(kDocuments, 0, 7, kLengths, fixed_targets(2)),
                          "outside the dataset's 6 documents");
  const std::vector<std::int64_t> beyond = {0, 4, 99};
  EXPECT_ERROR_MENTIONING(build_sample_mapping(beyond, 0, 2, kLengths, fixed_targets(2)),
                          "entry 2 (99)");
}

// ---- BERT samples ---------------------------------------------------------------------------

// ids 0..4 [PAD] [UNK] [CLS] [SEP] [MASK]; 5..49 words; 50..59 "##" pieces.
struct TestVocabulary {
  std::vector<std::uint8_t> continues_word;
  std::vector<std::int64_t> lookup;
  WordPieceVocabulary view;
  explicit TestVocabulary(std::int64_t pad = 0) {
    std::vector<std::string> strings = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int i = 5; i < 60; ++i)
      strings.push_back((i >= 50 ? "##x" : "w") + std::to_string(i));
    continues_word = continues_word_table(strings);
    for (std::int64_t i = 0; i < 60; ++i)
      lookup.push_back(i);
    view = {2, 3, pad, 4, continues_word, lookup};
  }
};

std::vector<std::int64_t> words(std::int64_t first, std::int64_t count) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < count; ++i)
    out.push_back(first + i);
  return out;
}

// The text with the masked positions put back to their labels.
std::vector<std::int64_t> unmasked(const BertSample& sample) {
  std::vector<std::int64_t> out = sample.text;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (sample.loss_mask[i]) out[i] = sample.labels[i];
  }
  return out;
}

BertSampleOptions options_for(std::int64_t sequence_length, bool head) {
  BertSampleOptions options;
  options.sequence_length = sequence_length;
  options.classification_head = head;
  return options;
}

TEST(BertSample, TwoSentencesPivotAtOneAndSwapOnTheFirstDraw) {
  const TestVocabulary vocabulary;
  const std::vector<std::vector<std::int64_t>> sentences = {words(5, 4), words(20, 3)};
  const BertSampleOptions options = options_for(16, true);
  int swapped = 0;
  for (std::int64_t idx = 0; idx < 40; ++idx) {
    const BertSample sample = make_bert_sample(sentences, 13, idx, options, vocabulary.view);
    // No randint for two sentences: the sample's first draw decides the swap.
    const bool expected_swap = NumpyRandomState(1234 + idx).random() < 0.5;
    ASSERT_EQ(sample.is_random, expected_swap ? 1 : 0) << idx;
    swapped += sample.is_random;
    const auto& a = expected_swap ? sentences[1] : sentences[0];
    const auto& b = expected_swap ? sentences[0] : sentences[1];
    std::vector<std::int64_t> text = {2};
    text.insert(text.end(), a.begin(), a.end());
    text.push_back(3);
    text.insert(text.end(), b.begin(), b.end());
    text.push_back(3);
    std::vector<std::int64_t> types(a.size() + 2, 0);
    types.resize(text.size(), 1);
    text.resize(16, 0);
    types.resize(16, 0);
    EXPECT_EQ(unmasked(sample), text) << idx;
    EXPECT_EQ(sample.types, types) << idx;
    EXPECT_EQ(sample.truncated, 0);
  }
  EXPECT_GT(swapped, 5);
  EXPECT_LT(swapped, 35);
}

TEST(BertSample, ThreeSentencesSplitAtOneOfTheTwoInnerBoundaries) {
  const TestVocabulary vocabulary;
  const std::vector<std::vector<std::int64_t>> sentences = {words(5, 2), words(10, 3),
                                                            words(20, 4)};
  std::set<std::size_t> a_sizes;
  for (std::int64_t idx = 0; idx < 30; ++idx) {
    const BertSample sample =
        make_bert_sample(sentences, 20, idx, options_for(24, true), vocabulary.view);
    const auto text = unmasked(sample);
    const auto first_sep =
        static_cast<std::size_t>(std::find(text.begin() + 1, text.end(), 3) - text.begin());
    a_sizes.insert(first_sep - 1);
    // A is a prefix or a suffix of the sentences: 2 or 5 tokens (or 7 or 4 when swapped).
    EXPECT_TRUE(std::set<std::size_t>({2, 5, 7, 4}).count(first_sep - 1)) << idx;
  }
  EXPECT_GT(a_sizes.size(), 1u);
}

TEST(BertSample, TruncationTrimsTheLongerSegmentFromEitherEnd) {
  const TestVocabulary vocabulary;
  const std::vector<std::int64_t> longer = words(5, 10);
  const std::vector<std::vector<std::int64_t>> sentences = {longer, words(30, 3)};
  std::set<std::int64_t> first_kept;
  for (std::int64_t idx = 0; idx < 30; ++idx) {
    // 13 tokens into a target of 8: the 10-token segment loses 5, the 3-token one none.
    const BertSample sample =
        make_bert_sample(sentences, 8, idx, options_for(12, true), vocabulary.view);
    EXPECT_EQ(sample.truncated, 1);
    const auto text = unmasked(sample);
    const std::size_t a_size = sample.is_random ? 3 : 5;
    const std::size_t b_begin = a_size + 2;
    const std::vector<std::int64_t> short_part = {30, 31, 32};
    const auto kept_begin = text.begin() + (sample.is_random ? b_begin : 1);
    const std::vector<std::int64_t> kept(kept_begin, kept_begin + 5);
    const std::vector<std::int64_t> whole(text.begin() + (sample.is_random ? 1 : b_begin),
                                          text.begin() + (sample.is_random ? 4 : b_begin + 3));
    EXPECT_EQ(whole, short_part) << idx;
    // The kept 5 tokens are a contiguous run of the 10.
    EXPECT_EQ(kept, words(kept[0], 5)) << idx;
    EXPECT_GE(kept[0], 5);
    EXPECT_LE(kept[0], 10);
    first_kept.insert(kept[0]);
    EXPECT_EQ(text[10], 3);
    EXPECT_EQ(sample.padding_mask[10], 1);
    EXPECT_EQ(sample.padding_mask[11], 0);
  }
  EXPECT_GT(first_kept.size(), 1u);  // both ends are trimmed over the samples
}

TEST(BertSample, WithoutTheBinaryHeadOneSegmentAndNoSwap) {
  const TestVocabulary vocabulary;
  const std::vector<std::vector<std::int64_t>> sentences = {words(5, 3)};
  const BertSample sample =
      make_bert_sample(sentences, 5, 3, options_for(8, false), vocabulary.view);
  EXPECT_EQ(unmasked(sample), (std::vector<std::int64_t>{2, 5, 6, 7, 3, 0, 0, 0}));
  EXPECT_EQ(sample.types, (std::vector<std::int64_t>(8, 0)));
  EXPECT_EQ(sample.is_random, 0);
  EXPECT_EQ(sample.truncated, 0);
}

TEST(BertSample, PaddingUsesThePadIdForTextTypesAndPaddingMask) {
  const TestVocabulary vocabulary(/*pad=*/7);
  const std::vector<std::vector<std::int64_t>> sentences = {words(10, 6), words(20, 6)};
  // 15 tokens in 20; budget min(0.15 * 12, max(1, round(0.15 * 15))) = 1.8: one word masked.
  const BertSample sample =
      make_bert_sample(sentences, 12, 0, options_for(20, true), vocabulary.view);
  ASSERT_EQ(sample.text.size(), 20u);
  for (std::size_t i = 15; i < 20; ++i) {
    EXPECT_EQ(sample.text[i], 7);
    EXPECT_EQ(sample.types[i], 7);  // Megatron pads the types with the pad id
    EXPECT_EQ(sample.padding_mask[i], 7);
    EXPECT_EQ(sample.labels[i], -1);
    EXPECT_EQ(sample.loss_mask[i], 0);
  }
  EXPECT_EQ(
      std::vector<std::int64_t>(sample.padding_mask.begin(), sample.padding_mask.begin() + 15),
      std::vector<std::int64_t>(15, 1));
  // Masked positions carry their label and a loss; the rest -1 and 0.
  int masked = 0;
  for (std::size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(sample.loss_mask[i] == 1, sample.labels[i] != -1) << i;
    masked += static_cast<int>(sample.loss_mask[i]);
  }
  EXPECT_EQ(masked, 1);
}

TEST(BertSample, ABudgetBelowOneMasksNothing) {
  const TestVocabulary vocabulary;
  const std::vector<std::vector<std::int64_t>> sentences = {words(10, 2), words(20, 2)};
  // min(0.15 * 6, max(1, round(0.15 * 7))) = 0.9, and no word fits in 0.9.
  for (std::int64_t idx = 0; idx < 10; ++idx) {
    const BertSample sample =
        make_bert_sample(sentences, 6, idx, options_for(10, true), vocabulary.view);
    EXPECT_EQ(sample.loss_mask, std::vector<std::int64_t>(10, 0));
    EXPECT_EQ(sample.labels, std::vector<std::int64_t>(10, -1));
  }
}

TEST(BertSample, RefusesBadInput) {
  const TestVocabulary vocabulary;
  const std::vector<std::vector<std::int64_t>> one = {words(5, 3)};
  EXPECT_ERROR_MENTIONING(make_bert_sample(one, 5, 0, options_for(8, true), vocabulary.view),
                          "1 sentence(s); the binary head needs at least two");
  EXPECT_ERROR_MENTIONING(make_bert_sample(one, 9, 0, options_for(8, false), vocabulary.view),
                          "target length 9 is outside [0, 8]");
  const std::vector<std::vector<std::int64_t>> unknown = {{5, 60}};
  EXPECT_ERROR_MENTIONING(make_bert_sample(unknown, 5, 0, options_for(8, false), vocabulary.view),
                          "token id 60", "outside the vocabulary of 60 ids");
}

// ---- Masking --------------------------------------------------------------------------------

TEST(Masking, WholeWordsSpecialsBudgetAndT5Spans) {
  const TestVocabulary vocabulary;
  // [CLS] w ##x ##x w w ##x [SEP] w ##x w [SEP] ... long enough for several maskings.
  std::vector<std::int64_t> tokens = {2};
  for (int k = 0; k < 12; ++k) {
    tokens.insert(tokens.end(), {5 + k, 50, 51, 20 + k, 30 + k, 52});
    tokens.push_back(3);
  }
  MaskingOptions t5;
  t5.masking_max_ngram = 10;
  t5.masking_use_geometric_distribution = true;
  for (const bool geometric : {false, true}) {
    for (std::int64_t seed = 0; seed < 20; ++seed) {
      NumpyRandomState random(seed);
      const MaskingOptions options = geometric ? t5 : MaskingOptions{};
      const auto replacement = geometric ? MaskReplacement::kAlwaysMask : MaskReplacement::kBert;
      const MaskedLmPredictions p =
          create_masked_lm_predictions(tokens, 200, options, vocabulary.view, replacement, random);
      // Budget: min(0.15 * 200, max(1, round(85 * 0.15) = 13)) = 13.
      EXPECT_LE(p.positions.size(), 13u);
      EXPECT_GE(p.positions.size(), 10u);
      EXPECT_TRUE(std::is_sorted(p.positions.begin(), p.positions.end()));
      std::set<std::int64_t> masked(p.positions.begin(), p.positions.end());
      for (std::size_t k = 0; k < p.positions.size(); ++k) {
        const auto i = static_cast<std::size_t>(p.positions[k]);
        EXPECT_NE(tokens[i], 2);
        EXPECT_NE(tokens[i], 3);
        EXPECT_EQ(p.labels[k], tokens[i]);
        if (geometric) {
          EXPECT_EQ(p.tokens[i], 4);
        }
        // A "##" piece is masked with the word it continues (whole-word masking).
        if (vocabulary.continues_word[static_cast<std::size_t>(tokens[i])]) {
          EXPECT_TRUE(masked.count(p.positions[k] - 1)) << "seed " << seed;
        }
      }
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (!masked.count(static_cast<std::int64_t>(i))) {
          EXPECT_EQ(p.tokens[i], tokens[i]);
        }
      }
      // The spans partition the masked positions, in order.
      std::vector<std::int64_t> from_spans;
      for (const MaskedSpan& span : p.spans) {
        from_spans.insert(from_spans.end(), span.positions.begin(), span.positions.end());
        for (std::size_t k = 0; k < span.positions.size(); ++k)
          EXPECT_EQ(span.labels[k], tokens[static_cast<std::size_t>(span.positions[k])]);
      }
      EXPECT_EQ(from_spans, p.positions);
      EXPECT_EQ(p.boundaries.size(), tokens.size());
      EXPECT_EQ(p.boundaries[1], 1);
      EXPECT_EQ(p.boundaries[2], 0);
    }
  }
}

TEST(Masking, RefusesBadOptions) {
  const TestVocabulary vocabulary;
  const std::vector<std::int64_t> tokens = {2, 5, 6, 3};
  NumpyRandomState random(1);
  MaskingOptions options;
  options.masking_probability = 1.0;
  EXPECT_THROW(create_masked_lm_predictions(tokens, 4, options, vocabulary.view,
                                            MaskReplacement::kBert, random),
               ConfigError);
  options = {};
  options.masking_use_geometric_distribution = true;
  options.masking_do_permutation = true;
  EXPECT_THROW(check_masking_options(options), ConfigError);
  options = {};
  options.masking_do_permutation = true;
  EXPECT_ERROR_MENTIONING(create_masked_lm_predictions(tokens, 4, options, vocabulary.view,
                                                       MaskReplacement::kBert, random),
                          "global RandomState");
}

// ---- Cache ----------------------------------------------------------------------------------

TEST(MaskedCache, BuildsOnceThenLoadsAndRefusesADamagedMapping) {
  const testing::ScratchDir dir;
  GptDatasetIdentity identity;
  identity.dataset_path = "/data/bert_text_sentence";
  identity.split_string = "969, 30, 1";
  identity.split_matrix = split_matrix(parse_split(*identity.split_string));
  identity.tokenizer.class_name = "_BertWordPieceTokenizer";
  identity.tokenizer.paths = {"/data/vocab.txt"};
  BertSampleOptions options = options_for(16, true);
  std::vector<std::int64_t> documents = {0};
  std::vector<std::int32_t> lengths;
  for (int d = 0; d < 30; ++d) {
    for (int s = 0; s < 4; ++s)
      lengths.push_back(2 + (d + s) % 7);
    documents.push_back(static_cast<std::int64_t>(lengths.size()));
  }
  bool built = false;
  const IndexArray first = load_or_build_bert_sample_mapping(dir.path(), identity, options, 50,
                                                             documents, 0, 30, lengths, &built);
  EXPECT_TRUE(built);
  const MaskedCacheFiles files =
      bert_cache_files(dir.path(), bert_description(identity, options, 50));
  EXPECT_TRUE(std::filesystem::is_regular_file(files.description));
  EXPECT_TRUE(std::filesystem::is_regular_file(files.sample_index));
  EXPECT_TRUE(files.sample_index.filename().string().ends_with(
      "-BERTMaskedWordPieceDataset-sample_index.npy"));
  EXPECT_EQ(files.sample_index.filename().string().size(), 32 + 44u);

  const IndexArray second = load_or_build_bert_sample_mapping(dir.path(), identity, options, 50,
                                                              documents, 0, 30, lengths, &built);
  EXPECT_FALSE(built);
  EXPECT_EQ(first, second);

  // Another split is another description, so other files.
  identity.split = Split::kValid;
  EXPECT_NE(bert_cache_files(dir.path(), bert_description(identity, options, 50)).sample_index,
            files.sample_index);
  identity.split = Split::kTrain;

  std::vector<std::uint32_t> bad = {0, 4, 99};
  write_npy(files.sample_index, IndexArray(bad, {1, 3}));
  EXPECT_ERROR_MENTIONING(load_or_build_bert_sample_mapping(dir.path(), identity, options, 50,
                                                            documents, 0, 30, lengths),
                          "sample_index.npy", "at least 50 rows");
  bad = std::vector<std::uint32_t>(150, 1);
  bad[2] = 99;
  write_npy(files.sample_index, IndexArray(bad, {50, 3}));
  EXPECT_ERROR_MENTIONING(load_or_build_bert_sample_mapping(dir.path(), identity, options, 50,
                                                            documents, 0, 30, lengths),
                          "target lengths in [2, 13]", "(1, 1, 99) at row 0");
  EXPECT_EQ(default_bert_cache_dir("/data/x"),
            std::filesystem::path("/data/x/cache/BERTMaskedWordPieceDataset_indices"));
}

}  // namespace
}  // namespace megatron::data
