// Megatron's masked WordPiece datasets (BERT here, T5's sample in t5_samples.h), sample for
// sample: the sentence mapping of helpers.cpp build_mapping,
// MaskedWordPieceDataset._create_masked_lm_predictions, BERTMaskedWordPieceDataset.__getitem__,
// and the cache files Megatron names after the dataset classes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/data/gpt_indices.h"
#include "megatron/data/npy.h"
#include "megatron/data/numpy_random.h"

namespace megatron {
class IndexedDataset;
}

namespace megatron::data {

// ---- Sample mapping (helpers.cpp build_mapping) ---------------------------------------------

struct SampleMappingOptions {
  // Megatron's MegatronDataset num_samples: with a value the epochs repeat (each with new target
  // lengths) until an epoch starts with at least this many rows, so the mapping holds whole
  // epochs and usually more rows than asked. nullopt: one epoch (Megatron's docstring; its own
  // call cannot pass None to the C++ helper).
  std::optional<std::int64_t> num_samples;
  // Cap of the target lengths, in tokens of the sentences: S - 3 for BERT (CLS and two SEP),
  // S - 2 for T5. At least 2.
  std::int32_t max_seq_length = 0;
  // A row's target is shorter than max_seq_length about once in round(1 / short_seq_prob) rows.
  double short_seq_prob = 0.1;
  // Megatron's random_seed; build_mapping asserts it is positive (and adds 1 for the shuffle).
  std::int32_t seed = 1234;
  // Documents with fewer sentences are skipped: 2 for BERT with its binary head, else 1.
  std::int32_t min_num_sent = 1;
};

// build_mapping skips documents of two or more sentences that hold a sentence longer than this.
inline constexpr std::int32_t kLongSentenceLength = 512;

// The rows (first_sentence, end_sentence, target_length) of the split whose documents are
// [document_begin, document_end) of a sentence-level indexed dataset, shuffled as Megatron
// shuffles them. `document_indices` is the dataset's whole document index (D + 1 sentence
// boundaries) and `sentence_lengths` its sequence lengths; sentence numbers are absolute.
// Shape [n, 3], uint32 as Megatron stores it (int64 where Megatron uses uint64: more than 2^32
// sentences). Throws megatron::Error for an empty or out-of-range document range, a malformed
// document index, options build_mapping asserts against, and when num_samples > 0 but no
// document yields a row (Megatron would loop for 2^31 epochs).
IndexArray build_sample_mapping(std::span<const std::int64_t> document_indices,
                                std::int64_t document_begin, std::int64_t document_end,
                                std::span<const std::int32_t> sentence_lengths,
                                const SampleMappingOptions& options);

// One row of a mapping.
struct SampleMappingRow {
  std::int64_t first_sentence = 0;
  std::int64_t end_sentence = 0;  // one past the last sentence
  std::int64_t target_length = 0;
};
SampleMappingRow sample_mapping_row(const IndexArray& mapping, std::int64_t row);

// Row `sample_index` of `mapping` read from `dataset`: the token ids of its sentences in order and
// its target length, what make_bert_sample and make_t5_sample take. Throws megatron::Error
// "<sample_kind> sample <i>: sentences [b, e) are outside ..." for a row outside the dataset.
struct MappedSentences {
  std::vector<std::vector<std::int64_t>> sentences;
  std::int64_t target_length = 0;
};
MappedSentences read_mapped_sentences(const IndexedDataset& dataset, const IndexArray& mapping,
                                      std::int64_t sample_index, std::string_view sample_kind);

// ---- Masking (MaskedWordPieceDataset._create_masked_lm_predictions) -------------------------

// MaskedWordPieceDatasetConfig's masking fields. The defaults are pretrain_bert.py's; T5
// (pretrain_t5.py) uses masking_max_ngram 10 and masking_use_geometric_distribution.
struct MaskingOptions {
  double masking_probability = 0.15;  // --mask-prob
  std::int64_t masking_max_ngram = 3;
  bool masking_do_full_word = true;
  bool masking_do_permutation = false;
  bool masking_use_longer_ngrams = false;
  bool masking_use_geometric_distribution = false;
};
// MaskedWordPieceDatasetConfig.__post_init__'s checks; throws megatron::ConfigError.
void check_masking_options(const MaskingOptions& options);

// What _get_token_mask does with a chosen token: BERT replaces it with [MASK] 80% of the time, a
// random vocabulary id 10%, leaves it 10% (two or three draws); T5 always uses [MASK] (no draw).
enum class MaskReplacement { kBert, kAlwaysMask };

// The tokenizer facts the masking and the BERT layout need.
struct WordPieceVocabulary {
  std::int64_t cls = 0;
  std::int64_t sep = 0;
  std::int64_t pad = 0;
  std::int64_t mask = 0;
  // Indexed by token id: nonzero when the id's vocabulary string starts with "##" (it continues
  // a word). Every token id in a sample must be inside it, as Megatron's inv_vocab lookup needs.
  std::span<const std::uint8_t> continues_word;
  // BERT's random replacements: list(tokenizer.inv_vocab.keys()), i.e. the ids in vocab order.
  std::span<const std::int64_t> token_lookup;
};
// continues_word table from the vocabulary strings in id order.
std::vector<std::uint8_t> continues_word_table(std::span<const std::string> vocabulary);

struct MaskedSpan {
  std::vector<std::int64_t> positions;
  std::vector<std::int64_t> labels;  // the original ids at those positions
};

struct MaskedLmPredictions {
  std::vector<std::int64_t> tokens;      // the sequence after masking
  std::vector<std::int64_t> positions;   // masked (and permuted) positions, ascending
  std::vector<std::int64_t> labels;      // the original ids at `positions`
  std::vector<std::int64_t> boundaries;  // 1 at CLS/SEP and word starts, 0 at "##" pieces
  std::vector<MaskedSpan> spans;         // masked n-grams by first position (T5's sentinels)
};

// _create_masked_lm_predictions on `token_ids` (CLS and SEP are never masked), drawing from
// `random` in Megatron's order. `global_random` stands for numpy's process-global RandomState,
// which Megatron's permutation branch draws its n-gram sizes from; it is needed only with
// masking_do_permutation (an Error otherwise). Throws megatron::Error for an id outside
// vocabulary.continues_word, or an empty token_lookup with kBert.
MaskedLmPredictions create_masked_lm_predictions(std::span<const std::int64_t> token_ids,
                                                 std::int64_t target_sequence_length,
                                                 const MaskingOptions& options,
                                                 const WordPieceVocabulary& vocabulary,
                                                 MaskReplacement replacement,
                                                 NumpyRandomState& random,
                                                 NumpyRandomState* global_random = nullptr);

// The seed of sample `sample_index`'s RandomState in every masked dataset:
// (random_seed + idx) % 2**32, with Python's non-negative modulo.
std::int64_t masked_sample_seed(std::int64_t seed, std::int64_t sample_index);

// ---- BERT sample (BERTMaskedWordPieceDataset.__getitem__) -----------------------------------

struct BertSampleOptions {
  std::int64_t sequence_length = 512;  // S
  bool classification_head = true;     // the binary (sentence order) head; false with
                                       // --bert-no-binary-head
  std::int64_t seed = 1234;            // random_seed: sample i uses RandomState((seed+i) % 2^32)
  double short_sequence_probability = 0.1;  // only for the mapping and the description
  MaskingOptions masking;
};

// Mapping options for BERT: max_seq_length S - 3, min_num_sent 2 with the binary head else 1.
SampleMappingOptions bert_sample_mapping_options(const BertSampleOptions& options,
                                                 std::optional<std::int64_t> num_samples);

// The dict __getitem__ returns. The five arrays are numpy int64 of length S in Megatron;
// is_random and truncated are Python ints (0/1).
struct BertSample {
  std::vector<std::int64_t> text;          // [CLS] A [SEP] B [SEP], padded with pad
  std::vector<std::int64_t> types;         // 0 for CLS/A/SEP, 1 for B/SEP, padded with pad
  std::vector<std::int64_t> labels;        // -1 except the original id at masked positions
  std::vector<std::int64_t> loss_mask;     // 1 at masked positions
  std::vector<std::int64_t> padding_mask;  // 1 over the tokens, then pad (Megatron pads it with
                                           // the pad id, which is 0 for BERT vocabularies)
  std::int64_t is_random = 0;              // A and B swapped (sentence order prediction)
  std::int64_t truncated = 0;
};

// Sample `sample_index` from its mapping row's sentences (token ids of sentences
// [first_sentence, end_sentence) in order) and target length. Throws megatron::Error when the
// target exceeds S, when the binary head is on and there are fewer than two sentences, or when
// a token id is outside the vocabulary.
BertSample make_bert_sample(std::span<const std::vector<std::int64_t>> sentences,
                            std::int64_t target_sequence_length, std::int64_t sample_index,
                            const BertSampleOptions& options,
                            const WordPieceVocabulary& vocabulary);
// The same, reading row `sample_index` of `mapping` and its sentences from `dataset`.
BertSample make_bert_sample(const IndexedDataset& dataset, const IndexArray& mapping,
                            std::int64_t sample_index, const BertSampleOptions& options,
                            const WordPieceVocabulary& vocabulary);

// ---- Cache (MaskedWordPieceDataset._build_sample_index) -------------------------------------

// Megatron's _BertWordPieceTokenizer as MegatronTokenizer describes it (BERT and T5 use it): its
// class, the vocab file, lower_case and vocab_extra_ids as Python's str() ("True", "100").
TokenizerIdentity wordpiece_tokenizer_identity(bool lower_case, const std::string& vocab_file,
                                               std::int64_t vocab_extra_ids);

// Megatron's unique description (JSON, indent 4) of a BERTMaskedWordPieceDataset: the
// MegatronDataset identity (GptDatasetIdentity holds it for every dataset class), num_samples,
// the masking fields, short_sequence_probability and classification_head.
std::string bert_description(const GptDatasetIdentity& identity, const BertSampleOptions& options,
                             std::optional<std::int64_t> num_samples);

// The Python class names Megatron's masked datasets name their cache folders and files after.
inline constexpr std::string_view kBertDatasetClass = "BERTMaskedWordPieceDataset";
inline constexpr std::string_view kT5DatasetClass = "T5MaskedWordPieceDataset";

// Megatron's default cache folder: <dataset path prefix>/cache/<class name>_indices.
std::filesystem::path default_masked_cache_dir(const std::string& dataset_path,
                                               std::string_view class_name);
// default_masked_cache_dir for BERTMaskedWordPieceDataset.
std::filesystem::path default_bert_cache_dir(const std::string& dataset_path);

// The two cache files, <md5>-<class name>-{description.txt,sample_index.npy}. Unlike
// GPTDataset's, the names carry no split: the md5 of the description (which names the split)
// tells the splits apart.
struct MaskedCacheFiles {
  std::filesystem::path description;
  std::filesystem::path sample_index;
};
MaskedCacheFiles masked_cache_files(const std::filesystem::path& cache_dir,
                                    std::string_view class_name, const std::string& description);
// masked_cache_files for BERTMaskedWordPieceDataset.
MaskedCacheFiles bert_cache_files(const std::filesystem::path& cache_dir,
                                  const std::string& description);

// Loads the mapping from `cache_dir` when both files of `class_name` are there with this
// description, otherwise builds it with build_sample_mapping(mapping_options) and writes both
// (each through a temporary name, the description last). A loaded mapping that does not fit the
// data (dtype, shape, sentence range of the split, target lengths in [2, max_seq_length], fewer
// rows than mapping_options.num_samples) is refused with a megatron::Error.
IndexArray load_or_build_masked_sample_mapping(
    const std::filesystem::path& cache_dir, std::string_view class_name,
    const std::string& description, const SampleMappingOptions& mapping_options,
    std::span<const std::int64_t> document_indices, std::int64_t document_begin,
    std::int64_t document_end, std::span<const std::int32_t> sentence_lengths,
    bool* built = nullptr);

// load_or_build_masked_sample_mapping for a BERTMaskedWordPieceDataset with these options.
IndexArray load_or_build_bert_sample_mapping(const std::filesystem::path& cache_dir,
                                             const GptDatasetIdentity& identity,
                                             const BertSampleOptions& options,
                                             std::optional<std::int64_t> num_samples,
                                             std::span<const std::int64_t> document_indices,
                                             std::int64_t document_begin, std::int64_t document_end,
                                             std::span<const std::int32_t> sentence_lengths,
                                             bool* built = nullptr);

}  // namespace megatron::data
