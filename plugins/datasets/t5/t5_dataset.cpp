// The `t5` dataset: the splits through the core's SentenceSplits (Megatron's
// BlendedMegatronDatasetBuilder rules), each split's T5MaskedWordPieceDataset sample index from
// its cache, and samples as T5MaskedWordPieceDataset.__getitem__.
#include "t5_dataset.h"

#include <cmath>

#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron::t5_data {

T5Dataset::T5Dataset(PluginContext& context)
    : log_(context.log),
      parallel_(context.parallel),
      table_(context.config),
      options_(read_t5_data_options(context.config, context.core)),
      splits_(table_, options_.blends, options_.mid_level_dataset_surplus, log_, parallel_) {
  tokenizer_ = data::open_masked_data_tokenizer(table_, options_);
  const bool talk = parallel_.world_rank() == 0;
  for (const auto& dataset : splits_.datasets()) {
    // Megatron's T5 takes one sentence per sample at least, so a document-level file works, but
    // each of its documents becomes a single sample cut to its target length.
    if (talk && dataset->data.size() == dataset->data.document_count()) {
      log_.warn(
          "data: {} holds one sequence per document: each document gives one sample, cut to "
          "its target length; preprocess the corpus with --split-sentences to use all of it",
          dataset->prefix);
    }
  }
  for (const TokenId id : tokenizer_->additional_special_token_ids())
    sentinels_.push_back(id);
  try {
    // T5 always masks with [MASK] internally, so no random-replacement lookup is needed.
    wordpiece_ = data::TokenizerVocabulary(*tokenizer_, /*random_replacements=*/false);
    vocabulary_.wordpiece = wordpiece_.wordpiece();
    vocabulary_.bos = data::required_special_token(*tokenizer_, SpecialToken::bos, "[BOS]");
    vocabulary_.eos = data::required_special_token(*tokenizer_, SpecialToken::eos, "[EOS]");
  } catch (const Error& e) {
    table_.fail("tokenizer_type", e.what());  // a special token is missing
  }
  vocabulary_.sentinels = sentinels_;
  data::check_masking_options(options_.sample.masking);
  // A sample masks at most floor(mask_prob x (encoder length - 2)) tokens, so at most as many
  // spans; with fewer sentinels some sample may run out (an error when it is read).
  const auto most_spans = static_cast<std::int64_t>(
      std::floor(options_.sample.masking.masking_probability *
                 static_cast<double>(options_.sample.encoder_length - 2)));
  if (talk && static_cast<std::int64_t>(sentinels_.size()) < most_spans) {
    log_.warn(
        "data: vocab_extra_ids = {} gives fewer sentinels than the {} spans a sample may mask; "
        "a sample with more spans is an error",
        sentinels_.size(), most_spans);
  }
}

SampleSpec t5_sample_fields(const T5DataOptions& options) {
  const Shape encoder{options.sample.encoder_length};
  const Shape decoder{options.sample.decoder_length};
  return {{"text_enc", DType::i32, encoder, FieldKind::token_ids},
          {"text_dec", DType::i32, decoder, FieldKind::token_ids},
          {"labels", DType::i32, decoder, FieldKind::labels},
          {"loss_mask", DType::f32, decoder, FieldKind::mask},
          {"truncated", DType::i32, {}, FieldKind::value},
          {"enc_mask", DType::i32, encoder, FieldKind::mask},
          {"dec_mask", DType::i32, decoder, FieldKind::mask}};
}

SampleSpec T5Dataset::sample_fields() const {
  return t5_sample_fields(options_);
}

void T5Dataset::build(const std::array<std::int64_t, 3>& num_samples) {
  splits_.build(num_samples, [this](const data::SentenceMappingRequest& request) {
    return build_mapping(request);
  });
}

data::SentenceMapping T5Dataset::build_mapping(const data::SentenceMappingRequest& request) const {
  const data::SentenceDataset& source = *request.source;
  data::SentenceMapping out;
  out.cache_dir = data::masked_cache_dir(options_, source.prefix, data::kT5DatasetClass);
  out.mapping = data::load_or_build_t5_sample_mapping(
      out.cache_dir, data::masked_dataset_identity(request, options_), options_.sample,
      request.num_samples, source.document_indices, request.documents.begin, request.documents.end,
      source.sentence_lengths, &out.built);
  return out;
}

void T5Dataset::get(data::Split split, std::int64_t index, const SampleSlots& out) const {
  const data::SentenceSplits::Item item = splits_.locate(split, index);
  data::T5Sample s;
  try {
    s = data::make_t5_sample(item.source->data, *item.mapping, item.index, options_.sample,
                             vocabulary_);
  } catch (const ConfigError& e) {  // a setting that does not fit the data: still exit 2
    throw ConfigError("the " + std::string(data::split_name(split)) + " split of " +
                      item.source->prefix + ": " + e.what());
  } catch (const Error& e) {
    throw Error("the " + std::string(data::split_name(split)) + " split of " + item.source->prefix +
                ": " + e.what());
  }
  auto copy = [](const std::vector<std::int64_t>& from, auto to) {
    for (std::size_t i = 0; i < from.size(); ++i)
      to[i] = static_cast<typename decltype(to)::value_type>(from[i]);
  };
  copy(s.text_enc, out.i32("text_enc"));
  copy(s.text_dec, out.i32("text_dec"));
  copy(s.labels, out.i32("labels"));
  copy(s.loss_mask, out.f32("loss_mask"));
  out.i32("truncated")[0] = static_cast<std::int32_t>(s.truncated);
  copy(s.enc_mask, out.i32("enc_mask"));
  copy(s.dec_mask, out.i32("dec_mask"));
}

}  // namespace megatron::t5_data
