// T5MaskedWordPieceDataset.__getitem__: the row's sentences joined and cut to the target length,
// span masking (always [MASK] internally), then the encoder input with one sentinel per span and
// the decoder input and labels made of the spans, drawing from the sample's own RandomState.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "megatron/data/indexed_dataset.h"
#include "megatron/data/t5_samples.h"
#include "megatron/error.h"

namespace megatron::data {

MaskingOptions t5_masking_options(double masking_probability) {
  MaskingOptions out;
  out.masking_probability = masking_probability;
  out.masking_max_ngram = 10;
  out.masking_do_full_word = true;
  out.masking_do_permutation = false;
  out.masking_use_longer_ngrams = false;
  out.masking_use_geometric_distribution = true;
  return out;
}

SampleMappingOptions t5_sample_mapping_options(const T5SampleOptions& options,
                                               std::optional<std::int64_t> num_samples) {
  if (options.encoder_length - 2 > std::numeric_limits<std::int32_t>::max() ||
      options.seed > std::numeric_limits<std::int32_t>::max()) {
    throw Error("T5 sample mapping: the encoder length and the seed must fit in int32");
  }
  SampleMappingOptions out;
  out.num_samples = num_samples;
  out.max_seq_length = static_cast<std::int32_t>(options.encoder_length - 2);
  out.short_seq_prob = options.short_sequence_probability;
  out.seed = static_cast<std::int32_t>(options.seed);
  out.min_num_sent = 1;
  return out;
}

T5Sample make_t5_sample(std::span<const std::vector<std::int64_t>> sentences,
                        std::int64_t target_sequence_length, std::int64_t sample_index,
                        const T5SampleOptions& options, const T5Vocabulary& vocabulary) {
  const std::string name = "T5 sample " + std::to_string(sample_index);
  if (target_sequence_length < 0 || target_sequence_length > options.encoder_length) {
    throw Error(name + ": target length " + std::to_string(target_sequence_length) +
                " is outside [0, " + std::to_string(options.encoder_length) + "]");
  }
  if (sample_index < 0)
    throw Error("T5 sample index " + std::to_string(sample_index) + " is negative");
  NumpyRandomState random(masked_sample_seed(options.seed, sample_index));

  // Megatron keeps the head of the joined sentences (no random trimming, unlike BERT).
  std::vector<std::int64_t> tokens;
  for (const auto& sentence : sentences)
    tokens.insert(tokens.end(), sentence.begin(), sentence.end());
  const bool truncated = static_cast<std::int64_t>(tokens.size()) > target_sequence_length;
  if (truncated) tokens.resize(static_cast<std::size_t>(target_sequence_length));

  const MaskedLmPredictions masked =
      create_masked_lm_predictions(tokens, target_sequence_length, options.masking,
                                   vocabulary.wordpiece, MaskReplacement::kAlwaysMask, random);
  if (masked.spans.size() > vocabulary.sentinels.size()) {
    throw Error(name + " masks " + std::to_string(masked.spans.size()) +
                " spans but the tokenizer has only " + std::to_string(vocabulary.sentinels.size()) +
                " sentinels <extra_id_N>; raise vocab_extra_ids (Megatron's examples use 100)");
  }

  // The encoder keeps the unmasked tokens (taken from the masked sequence, as Megatron does; they
  // are unchanged there) with one sentinel in place of each span.
  T5Sample out;
  std::vector<std::int64_t> decoder{vocabulary.bos};
  std::size_t begin = 0;
  for (std::size_t k = 0; k < masked.spans.size(); ++k) {
    const MaskedSpan& span = masked.spans[k];
    const std::int64_t sentinel = vocabulary.sentinels[k];
    out.text_enc.insert(out.text_enc.end(),
                        masked.tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                        masked.tokens.begin() + span.positions.front());
    out.text_enc.push_back(sentinel);
    decoder.push_back(sentinel);
    decoder.insert(decoder.end(), span.labels.begin(), span.labels.end());
    out.labels.push_back(sentinel);
    out.labels.insert(out.labels.end(), span.labels.begin(), span.labels.end());
    begin = static_cast<std::size_t>(span.positions.back()) + 1;
  }
  out.text_enc.insert(out.text_enc.end(),
                      masked.tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                      masked.tokens.end());
  out.labels.push_back(vocabulary.eos);
  out.text_dec = std::move(decoder);

  // The encoder holds at most the target's tokens (each span of one or more tokens becomes one
  // sentinel), and the target is at most the encoder length (checked above). The decoder holds
  // <bos>, a sentinel per span and the masked tokens: up to 1 + 2 x floor(mask_prob x target),
  // 153 for Megatron's example (encoder 512, decoder 128, mask_prob 0.15) with single-token
  // spans, so nothing guarantees it fits; Megatron fails an assert where this throws.
  const auto encoder_tokens = static_cast<std::int64_t>(out.text_enc.size());
  const auto decoder_tokens = static_cast<std::int64_t>(out.text_dec.size());
  if (decoder_tokens > options.decoder_length) {
    // A configuration error (exit 2), found where Megatron's assert fires: at the first sample
    // that does not fit, which may come late in a run (earlier checkpoints stay intact).
    const auto bound =
        1 + 2 * static_cast<std::int64_t>(options.masking.masking_probability *
                                          static_cast<double>(options.encoder_length - 2));
    throw ConfigError(
        name + " needs " + std::to_string(decoder_tokens) + " decoder tokens (<bos>, " +
        std::to_string(masked.spans.size()) + " sentinels and " +
        std::to_string(masked.positions.size()) + " masked tokens) but decoder_seq_length is " +
        std::to_string(options.decoder_length) + "; raise [data] decoder_seq_length (" +
        std::to_string(bound) + " fits any sample of this encoder length)");
  }
  const auto encoder_size = static_cast<std::size_t>(options.encoder_length);
  const auto decoder_size = static_cast<std::size_t>(options.decoder_length);
  out.text_enc.resize(encoder_size, vocabulary.wordpiece.pad);
  out.text_dec.resize(decoder_size, vocabulary.wordpiece.pad);
  out.labels.resize(decoder_size, -1);
  out.enc_mask.assign(static_cast<std::size_t>(encoder_tokens), 1);
  out.enc_mask.resize(encoder_size, 0);
  out.dec_mask.assign(static_cast<std::size_t>(decoder_tokens), 1);
  out.dec_mask.resize(decoder_size, 0);
  out.loss_mask = out.dec_mask;
  out.truncated = truncated ? 1 : 0;
  return out;
}

T5Sample make_t5_sample(const IndexedDataset& dataset, const IndexArray& mapping,
                        std::int64_t sample_index, const T5SampleOptions& options,
                        const T5Vocabulary& vocabulary) {
  const MappedSentences row = read_mapped_sentences(dataset, mapping, sample_index, "T5");
  return make_t5_sample(row.sentences, row.target_length, sample_index, options, vocabulary);
}

}  // namespace megatron::data
