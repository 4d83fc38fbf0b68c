// The `t5` dataset plugin, created through the catalog: on every sample of a generated
// sentence-level dataset, the encoder (tokens with one sentinel per masked span) and the decoder
// labels (each sentinel followed by its span, then [EOS]) rebuild the row's truncated tokens
// exactly, with sentinels in order, whole-word spans of at most 10 words, Megatron's masking
// budget, padding and masks; samples are deterministic; the cache keeps Megatron's names; a
// weighted blend serves its constituents' samples; bad keys and samples that do not fit are
// refused with messages naming what is wrong.
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "dataset_plugin_fixture.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/data/t5_samples.h"
#include "megatron/error.h"
#include "megatron/tokenizer/tokenizer.h"
#include "sentence_dataset_writer.h"

namespace megatron::test {
namespace {

namespace fs = std::filesystem;
using data::Split;

const std::string kBertVocab = std::string(DATA_DIR) + "/bert-base-uncased-vocab.txt";
constexpr std::int64_t kEncoder = 64;
constexpr std::int64_t kDecoder = 32;
constexpr std::int64_t kExtraIds = 100;

// A sentence-level dataset: `documents` documents of 1 to `max_sentences` sentences of 1 to 30
// tokens drawn from bert-base-uncased's ids 1000..28999 (about one in six a "##" piece, none
// special).
std::string write_sentences(const std::string& prefix, int documents, unsigned seed,
                            int max_sentences = 6) {
  return write_sentence_dataset(prefix, documents, {1, max_sentences, 1, 30, 1000, 28999}, seed);
}

// A [data] table of the t5 dataset over `prefix` (all documents in train) plus `extra` keys.
constexpr const char* kLengths = "encoder_seq_length = 64\ndecoder_seq_length = 32";

// A [data] table of the t5 dataset with `data_path` (a TOML list), all documents in train, plus
// `extra` keys (default: 100 sentinels).
std::string t5_blend_table(const std::string& data_path, const std::string& extra = "",
                           const std::string& lengths = kLengths) {
  return "[data]\ntype = \"t5\"\ndata_path = " + data_path + "\nsplit = \"100,0,0\"\n" + lengths +
         "\ntokenizer_type = \"BertWordPieceLowerCase\"\nvocab_file = " + quoted(kBertVocab) +
         "\n" + (extra.empty() ? "vocab_extra_ids = 100\n" : extra + "\n");
}

// The same over the one dataset at `prefix`.
std::string t5_table(const std::string& prefix, const std::string& extra = "",
                     const std::string& lengths = kLengths) {
  return t5_blend_table("[" + quoted(prefix) + "]", extra, lengths);
}

struct T5Fields {
  std::vector<std::int32_t> text_enc, text_dec, labels, enc_mask, dec_mask;
  std::vector<float> loss_mask;
  std::int32_t truncated = 0;
  bool operator==(const T5Fields&) const = default;
};

T5Fields plugin_sample(const Dataset& dataset, Split split, std::int64_t index,
                       std::int64_t encoder = kEncoder, std::int64_t decoder = kDecoder) {
  Batch batch = Batch::allocate(dataset.sample_fields(), 1);
  dataset.get(split, index, batch.sample(0));
  T5Fields f;
  f.text_enc = field_values<std::int32_t>(batch, "text_enc", encoder);
  f.text_dec = field_values<std::int32_t>(batch, "text_dec", decoder);
  f.labels = field_values<std::int32_t>(batch, "labels", decoder);
  f.loss_mask = field_values<float>(batch, "loss_mask", decoder);
  f.enc_mask = field_values<std::int32_t>(batch, "enc_mask", encoder);
  f.dec_mask = field_values<std::int32_t>(batch, "dec_mask", decoder);
  f.truncated = field_values<std::int32_t>(batch, "truncated", 0).at(0);
  return f;
}

// The number of leading entries equal to 1 and a check that the rest are 0.
template <typename T>
std::size_t ones_then_zeros(const std::vector<T>& mask, const std::string& what) {
  const auto ones =
      static_cast<std::size_t>(std::find(mask.begin(), mask.end(), T{0}) - mask.begin());
  for (std::size_t i = 0; i < mask.size(); ++i)
    EXPECT_EQ(mask[i], i < ones ? T{1} : T{0}) << what << " at " << i;
  return ones;
}

class T5DatasetTest : public DatasetPluginTest {
 protected:
  T5DatasetTest()
      : DatasetPluginTest("t5"),
        tokenizer_(make_tokenizer("BertWordPieceLowerCase", {kBertVocab, "", kExtraIds})) {}

  bool continues_word(std::int64_t id) const {
    return tokenizer_->id_to_token(static_cast<TokenId>(id)).starts_with("##");
  }
  // The row's tokens as Megatron cuts them: the sentences joined, the first `target` kept. The
  // rows come from the core's build_sample_mapping (checked against Megatron's build_mapping in
  // bert_samples_reference and t5_data_command_check).
  std::vector<std::int64_t> row_tokens(const IndexedDataset& source,
                                       const data::IndexArray& mapping, std::int64_t row,
                                       bool* truncated) const {
    const data::SampleMappingRow r = data::sample_mapping_row(mapping, row);
    std::vector<std::int64_t> tokens;
    for (std::int64_t s = r.first_sentence; s < r.end_sentence; ++s) {
      const std::vector<std::int64_t> sentence = source.get(static_cast<std::size_t>(s));
      tokens.insert(tokens.end(), sentence.begin(), sentence.end());
    }
    *truncated = static_cast<std::int64_t>(tokens.size()) > r.target_length;
    if (*truncated) tokens.resize(static_cast<std::size_t>(r.target_length));
    return tokens;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(T5DatasetTest, SentinelsAndSpansRebuildEveryRowsTokens) {
  // Long documents and an encoder of 256: budgets of up to 0.15 x 254 = 38 tokens, so that
  // geometric sizes above 10 words (11% of the draws) would show if they were not capped. The
  // decoder needs at most 1 + 2 x 38 = 77 tokens.
  constexpr std::int64_t kLongEncoder = 256, kLongDecoder = 80;
  const std::string prefix = write_sentences(dir_.prefix("corpus"), 150, 1, 30);
  auto dataset = create(t5_table(prefix, "", "encoder_seq_length = 256\ndecoder_seq_length = 80"));
  dataset->build({400, 0, 0});
  const std::int64_t n = dataset->size(Split::kTrain);
  ASSERT_GE(n, 400);
  EXPECT_EQ(dataset->seq_length(), kLongEncoder);

  const IndexedDataset source(prefix);
  data::T5SampleOptions options;
  options.encoder_length = kLongEncoder;
  options.decoder_length = kLongDecoder;
  const data::IndexArray mapping = data::build_sample_mapping(
      source.document_indices(), 0, static_cast<std::int64_t>(source.document_count()),
      source.sequence_lengths(), data::t5_sample_mapping_options(options, 400));
  ASSERT_EQ(static_cast<std::int64_t>(mapping.rows()), n);

  const std::vector<TokenId> sentinel_ids = tokenizer_->additional_special_token_ids();
  ASSERT_EQ(sentinel_ids.size(), static_cast<std::size_t>(kExtraIds));
  const std::int64_t pad = *tokenizer_->special_token(SpecialToken::pad);
  const std::int64_t bos = *tokenizer_->special_token(SpecialToken::bos);
  const std::int64_t eos = *tokenizer_->special_token(SpecialToken::eos);
  auto sentinel_number = [&](std::int64_t id) -> std::int64_t {
    const auto at = std::find(sentinel_ids.begin(), sentinel_ids.end(), id);
    return at == sentinel_ids.end() ? -1 : at - sentinel_ids.begin();
  };

  std::int64_t tokens_total = 0, masked_total = 0, truncated_count = 0, unmasked_samples = 0;
  std::map<std::int64_t, std::int64_t> span_words;  // span length in words -> count
  for (std::int64_t k = 0; k < n; ++k) {
    SCOPED_TRACE("sample " + std::to_string(k));
    const T5Fields f = plugin_sample(*dataset, Split::kTrain, k, kLongEncoder, kLongDecoder);
    bool truncated = false;
    const std::vector<std::int64_t> original = row_tokens(source, mapping, k, &truncated);
    const std::int64_t target = data::sample_mapping_row(mapping, k).target_length;
    EXPECT_EQ(f.truncated, truncated ? 1 : 0);
    truncated_count += truncated;

    // Masks: ones over the tokens, then zeros; the loss mask is the decoder mask.
    const std::size_t enc_count = ones_then_zeros(f.enc_mask, "enc_mask");
    const std::size_t dec_count = ones_then_zeros(f.dec_mask, "dec_mask");
    ASSERT_EQ(ones_then_zeros(f.loss_mask, "loss_mask"), dec_count);
    for (std::size_t i = enc_count; i < f.text_enc.size(); ++i)
      EXPECT_EQ(f.text_enc[i], pad) << "encoder padding at " << i;
    for (std::size_t i = dec_count; i < f.text_dec.size(); ++i) {
      EXPECT_EQ(f.text_dec[i], pad) << "decoder padding at " << i;
      EXPECT_EQ(f.labels[i], -1) << "label padding at " << i;
    }
    // The decoder input is [BOS] then the labels shifted right; the labels end with [EOS].
    ASSERT_GE(dec_count, 1u);
    EXPECT_EQ(f.text_dec[0], bos);
    for (std::size_t i = 1; i < dec_count; ++i)
      EXPECT_EQ(f.text_dec[i], f.labels[i - 1]) << "decoder input at " << i;
    EXPECT_EQ(f.labels[dec_count - 1], eos);

    // The labels: sentinel 0, its span, sentinel 1, its span, ... [EOS]; no span is empty.
    std::vector<std::vector<std::int64_t>> spans;
    for (std::size_t i = 0; i + 1 < dec_count; ++i) {
      const std::int64_t number = sentinel_number(f.labels[i]);
      if (number >= 0) {
        EXPECT_EQ(number, static_cast<std::int64_t>(spans.size())) << "labels sentinel order";
        spans.emplace_back();
      } else {
        ASSERT_FALSE(spans.empty()) << "a label token before the first sentinel";
        spans.back().push_back(f.labels[i]);
      }
    }
    for (const auto& span : spans)
      EXPECT_FALSE(span.empty()) << "an empty span";

    // The encoder with each sentinel replaced by its span is the row's tokens; the spans are
    // whole words (start at a word start, end before one) of at most 10 words.
    std::vector<std::int64_t> rebuilt;
    std::size_t next_span = 0;
    std::int64_t masked = 0;
    for (std::size_t i = 0; i < enc_count; ++i) {
      const std::int64_t number = sentinel_number(f.text_enc[i]);
      if (number < 0) {
        rebuilt.push_back(f.text_enc[i]);
        continue;
      }
      ASSERT_EQ(number, static_cast<std::int64_t>(next_span)) << "encoder sentinel order";
      ASSERT_LT(next_span, spans.size()) << "more sentinels in the encoder than in the labels";
      const std::vector<std::int64_t>& span = spans[next_span++];
      EXPECT_TRUE(rebuilt.empty() || !continues_word(span.front()))
          << "a span starting inside a word at encoder position " << i;
      const std::size_t after = rebuilt.size() + span.size();
      EXPECT_TRUE(after >= original.size() || !continues_word(original[after]))
          << "a span ending inside a word at encoder position " << i;
      // Words: their first pieces, plus a leading "##" piece (the row may start inside a word).
      const auto words = std::count_if(span.begin(), span.end(),
                                       [&](std::int64_t t) { return !continues_word(t); }) +
                         (continues_word(span.front()) ? 1 : 0);
      EXPECT_LE(words, 10);
      ++span_words[words];
      rebuilt.insert(rebuilt.end(), span.begin(), span.end());
      masked += static_cast<std::int64_t>(span.size());
    }
    EXPECT_EQ(next_span, spans.size()) << "spans in the labels without a sentinel in the encoder";
    EXPECT_EQ(rebuilt, original);
    // [BOS] (or, in the labels, [EOS]), a sentinel per span and the masked tokens.
    EXPECT_EQ(static_cast<std::int64_t>(dec_count),
              1 + static_cast<std::int64_t>(spans.size()) + masked);

    // Megatron's budget: at most min(0.15 x target, max(1, round(0.15 x tokens))) tokens.
    const double budget =
        std::min(0.15 * static_cast<double>(target),
                 std::max(1.0, std::nearbyint(0.15 * static_cast<double>(original.size()))));
    EXPECT_LE(static_cast<double>(masked), budget);
    tokens_total += static_cast<std::int64_t>(original.size());
    masked_total += masked;
    unmasked_samples += spans.empty();
  }
  // Across the samples, about 15% is masked (the budget rounds, whole words may not fit); spans
  // of one word are common and longer ones occur (geometric sizes, p = 0.2, cut to the budget).
  const double fraction = static_cast<double>(masked_total) / static_cast<double>(tokens_total);
  EXPECT_GT(fraction, 0.10);
  EXPECT_LT(fraction, 0.17);
  EXPECT_GT(truncated_count, 0);
  EXPECT_LT(unmasked_samples, n / 10);
  std::int64_t span_count = 0;
  for (const auto& [words, count] : span_words)
    span_count += count;
  EXPECT_GT(span_words[1] * 100, span_count * 15) << "few one-word spans";
  EXPECT_GT(span_words.rbegin()->first, 3) << "no span of more than three words";
}

TEST_F(T5DatasetTest, SamplesAreDeterministicAndFollowTheSeed) {
  const std::string prefix = write_sentences(dir_.prefix("corpus"), 60, 2);
  auto first = create(t5_table(prefix));
  first->build({100, 0, 0});
  auto second = create(t5_table(prefix));  // loads the cached mapping
  second->build({100, 0, 0});
  ASSERT_EQ(first->size(Split::kTrain), second->size(Split::kTrain));
  for (std::int64_t k = 0; k < first->size(Split::kTrain); ++k) {
    EXPECT_EQ(plugin_sample(*first, Split::kTrain, k), plugin_sample(*second, Split::kTrain, k))
        << "sample " << k;
    EXPECT_EQ(plugin_sample(*first, Split::kTrain, k), plugin_sample(*first, Split::kTrain, k));
  }
  // seq_length is the alias Megatron accepts for the encoder length: the same samples.
  auto alias =
      create(t5_table(prefix, "vocab_extra_ids = 100", "seq_length = 64\ndecoder_seq_length = 32"));
  alias->build({100, 0, 0});
  EXPECT_EQ(plugin_sample(*alias, Split::kTrain, 7), plugin_sample(*first, Split::kTrain, 7));

  // Another seed gives another mapping and other masks.
  auto reseeded = create(t5_table(prefix) + "[training]\nseed = 99\n");
  reseeded->build({100, 0, 0});
  std::int64_t differing = 0;
  for (std::int64_t k = 0; k < 20; ++k)
    differing +=
        !(plugin_sample(*reseeded, Split::kTrain, k) == plugin_sample(*first, Split::kTrain, k));
  EXPECT_GT(differing, 10);
}

TEST_F(T5DatasetTest, CacheKeepsMegatronsNamesAndIsReused) {
  const std::string prefix = write_sentences(dir_.prefix("corpus"), 40, 3);
  auto dataset = create(t5_table(prefix));
  take_log();
  dataset->build({50, 0, 0});
  const fs::path folder = fs::path(prefix) / "cache" / "T5MaskedWordPieceDataset_indices";
  expect_mentions(take_log(), {"built the sample index into " + folder.string()});

  // Two files, <md5 of the description>-T5MaskedWordPieceDataset-{description.txt,
  // sample_index.npy}.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 2u);
  // Plain string checks: std::regex trips GCC 12's -Wmaybe-uninitialized under the sanitizers.
  const std::string suffix = "-T5MaskedWordPieceDataset-description.txt";
  ASSERT_EQ(names[0].size(), 32 + suffix.size()) << names[0];
  const std::string md5 = names[0].substr(0, 32);
  EXPECT_EQ(md5.find_first_not_of("0123456789abcdef"), std::string::npos) << names[0];
  EXPECT_EQ(names[0].substr(32), suffix);
  EXPECT_EQ(names[1], md5 + "-T5MaskedWordPieceDataset-sample_index.npy");
  std::ifstream in(folder / names[0]);
  const std::string description{std::istreambuf_iterator<char>(in),
                                std::istreambuf_iterator<char>()};
  EXPECT_EQ(data::description_md5(description), md5);
  // T5's own fields: the BERT masking fields with T5's switches, then the decoder length last.
  expect_mentions(description,
                  {"\"class\": \"T5MaskedWordPieceDataset\"", "\"sequence_length\": 64,",
                   "\"num_samples\": 50,", "\"index_split\": \"train\"",
                   "\"vocab_extra_ids\": \"100\"", "\"lower_case\": \"True\"",
                   "\"masking_max_ngram\": 10,", "\"masking_use_geometric_distribution\": true,",
                   "\"masking_do_permutation\": false,", "\"sequence_length_decoder\": 32\n}"});
  EXPECT_EQ(description.find("classification_head"), std::string::npos);

  // A second dataset with the same options loads the files; another decoder length is another
  // dataset (its own files).
  auto again = create(t5_table(prefix));
  again->build({50, 0, 0});
  expect_mentions(take_log(), {"loaded the sample index from " + folder.string()});
  auto longer = create(t5_table(prefix, "", "encoder_seq_length = 64\ndecoder_seq_length = 40"));
  longer->build({50, 0, 0});
  expect_mentions(take_log(), {"built the sample index into"});
  EXPECT_EQ(std::distance(fs::directory_iterator(folder), fs::directory_iterator()), 4);
}

TEST_F(T5DatasetTest, BadKeysAreRefusedNamingTheKey) {
  const std::string prefix = write_sentences(dir_.prefix("corpus"), 20, 4);
  expect_mentions(error_of([&] { create(t5_table(prefix, "vocab_extra_ids = 0")); }),
                  {"data.vocab_extra_ids", "sentinel"});
  expect_mentions(error_of([&] {
                    create("[data]\ntype = \"t5\"\ndata_path = [" + quoted(prefix) +
                           "]\nencoder_seq_length = 64\ndecoder_seq_length = 32\n"
                           "vocab_extra_ids = 100\n");
                  }),
                  {"data.vocab_file", "missing"});
  expect_mentions(error_of([&] {
                    create(t5_table(prefix, "vocab_extra_ids = 100\nvocab_file = " +
                                                quoted(dir_.prefix("no-vocab.txt"))));
                  }),
                  {"vocab_file"});
  expect_mentions(error_of([&] {
                    create(t5_table(prefix, "", "encoder_seq_length = 64\ndecoder_seq_length = 2"));
                  }),
                  {"data.decoder_seq_length", ">= 3"});
  expect_mentions(error_of([&] { create(t5_table(prefix, "", "encoder_seq_length = 64")); }),
                  {"data.decoder_seq_length", "missing"});
  expect_mentions(error_of([&] {
                    create(t5_table(prefix, "",
                                    "seq_length = 64\nencoder_seq_length = 64\n"
                                    "decoder_seq_length = 32"));
                  }),
                  {"data.seq_length", "encoder_seq_length"});
  expect_mentions(error_of([&] { create(t5_table(prefix, "", "decoder_seq_length = 32")); }),
                  {"data.encoder_seq_length", "missing"});
}

TEST_F(T5DatasetTest, SamplesThatDoNotFitAreErrorsNamingTheSample) {
  const std::string prefix = write_sentences(dir_.prefix("corpus"), 60, 5);
  // A decoder of 3 holds [BOS], one sentinel and one token: most samples mask more.
  auto short_decoder =
      create(t5_table(prefix, "", "encoder_seq_length = 64\ndecoder_seq_length = 3"));
  short_decoder->build({50, 0, 0});
  std::string message;
  for (std::int64_t k = 0; k < short_decoder->size(Split::kTrain) && message.empty(); ++k) {
    try {
      plugin_sample(*short_decoder, Split::kTrain, k, kEncoder, 3);
    } catch (const Error& e) {
      message = e.what();
    }
  }
  expect_mentions(message, {"train split of " + prefix, "T5 sample", "decoder tokens",
                            "decoder_seq_length is 3"});

  // One sentinel for samples that mask several spans: a warning, then an error when read.
  take_log();
  auto one_sentinel = create(t5_table(prefix, "vocab_extra_ids = 1"));
  expect_mentions(take_log(), {"vocab_extra_ids = 1", "fewer sentinels"});
  one_sentinel->build({50, 0, 0});
  message.clear();
  for (std::int64_t k = 0; k < one_sentinel->size(Split::kTrain) && message.empty(); ++k) {
    try {
      plugin_sample(*one_sentinel, Split::kTrain, k);
    } catch (const Error& e) {
      message = e.what();
    }
  }
  expect_mentions(message, {"T5 sample", "spans", "only 1 sentinels", "vocab_extra_ids"});
}

TEST_F(T5DatasetTest, WeightedBlendServesEachConstituentsSamplesInOrder) {
  const std::string a = write_sentences(dir_.prefix("a"), 40, 6);
  const std::string b = write_sentences(dir_.prefix("b"), 60, 7);
  auto blend = create(t5_blend_table("[0.3, " + quoted(a) + ", 0.7, " + quoted(b) + "]"));
  blend->build({50, 0, 0});
  // ceil(50 x 0.3) + ceil(50 x 0.7) = 15 + 35 samples; each constituent is built for its share
  // plus the 0.5% surplus: ceil(15 x 1.005) = 16 and ceil(35 x 1.005) = 36.
  ASSERT_EQ(blend->size(Split::kTrain), 50);
  const std::array<std::int64_t, 2> requested = {16, 36};
  std::vector<std::unique_ptr<Dataset>> alone;
  for (std::size_t d = 0; d < 2; ++d) {
    alone.push_back(create(t5_table(d == 0 ? a : b, "vocab_extra_ids = 100\ndata_cache_path = " +
                                                        quoted(dir_.prefix("alone")))));
    alone.back()->build({requested[d], 0, 0});
  }
  // Every blend sample is the next unused sample of one constituent (Megatron's BlendedDataset
  // hands each constituent its own sample indices in order), 15 from a and 35 from b.
  std::array<std::int64_t, 2> taken{};
  for (std::int64_t t = 0; t < 50; ++t) {
    const T5Fields got = plugin_sample(*blend, Split::kTrain, t);
    std::size_t d = 0;
    while (d < 2 && !(got == plugin_sample(*alone[d], Split::kTrain, taken[d])))
      ++d;
    ASSERT_LT(d, 2u) << "blend sample " << t << " is neither dataset's next sample";
    ++taken[d];
  }
  EXPECT_EQ(taken[0], 15);
  EXPECT_EQ(taken[1], 35);
  // Each constituent keeps its own cache under Megatron's default folder.
  for (const std::string& prefix : {a, b})
    EXPECT_TRUE(fs::is_directory(fs::path(prefix) / "cache" / "T5MaskedWordPieceDataset_indices"))
        << prefix;
}

}  // namespace
}  // namespace megatron::test
