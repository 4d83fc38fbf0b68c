// The `bert` dataset: the splits through the core's SentenceSplits (Megatron's
// BlendedMegatronDatasetBuilder rules), each split's BERTMaskedWordPieceDataset sample index from
// its cache, and samples as BERTMaskedWordPieceDataset.__getitem__.
#include "bert_dataset.h"

#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron::bert_data {

BertDataset::BertDataset(PluginContext& context)
    : log_(context.log),
      parallel_(context.parallel),
      table_(context.config),
      options_(read_bert_data_options(context.config, context.core)),
      splits_(table_, options_.blends, options_.mid_level_dataset_surplus, log_, parallel_) {
  tokenizer_ = data::open_masked_data_tokenizer(table_, options_);
  for (const auto& dataset : splits_.datasets()) {
    // build_mapping pairs sentences within documents; a document-level file (one sequence per
    // document) has none to pair.
    if (dataset->data.size() == dataset->data.document_count()) {
      table_.fail(dataset->key, "dataset " + dataset->prefix +
                                    " holds one sequence per document (" +
                                    std::to_string(dataset->data.size()) +
                                    "): BERT samples are made of sentences; preprocess the corpus "
                                    "with --split-sentences (its files end in _sentence)");
    }
  }
  try {
    vocabulary_ = data::TokenizerVocabulary(*tokenizer_, /*random_replacements=*/true);
  } catch (const Error& e) {
    table_.fail("tokenizer_type", e.what());  // a special token is missing
  }
  data::check_masking_options(options_.sample.masking);
}

SampleSpec bert_sample_fields(const BertDataOptions& options) {
  const Shape s{options.sample.sequence_length};
  return {{"text", DType::i32, s, FieldKind::token_ids},
          {"types", DType::i32, s, FieldKind::value},
          {"labels", DType::i32, s, FieldKind::labels},
          {"loss_mask", DType::f32, s, FieldKind::mask},
          {"padding_mask", DType::i32, s, FieldKind::mask},
          {"is_random", DType::i32, {}, FieldKind::value},
          {"truncated", DType::i32, {}, FieldKind::value}};
}

SampleSpec BertDataset::sample_fields() const {
  return bert_sample_fields(options_);
}

void BertDataset::build(const std::array<std::int64_t, 3>& num_samples) {
  splits_.build(num_samples, [this](const data::SentenceMappingRequest& request) {
    return build_mapping(request);
  });
}

data::SentenceMapping BertDataset::build_mapping(
    const data::SentenceMappingRequest& request) const {
  const data::SentenceDataset& source = *request.source;
  data::SentenceMapping out;
  out.cache_dir = data::masked_cache_dir(options_, source.prefix, data::kBertDatasetClass);
  out.mapping = data::load_or_build_bert_sample_mapping(
      out.cache_dir, data::masked_dataset_identity(request, options_), options_.sample,
      request.num_samples, source.document_indices, request.documents.begin, request.documents.end,
      source.sentence_lengths, &out.built);
  return out;
}

void BertDataset::get(data::Split split, std::int64_t index, const SampleSlots& out) const {
  const data::SentenceSplits::Item item = splits_.locate(split, index);
  const data::BertSample s = data::make_bert_sample(item.source->data, *item.mapping, item.index,
                                                    options_.sample, vocabulary_.wordpiece());
  auto copy = [](const std::vector<std::int64_t>& from, auto to) {
    for (std::size_t i = 0; i < from.size(); ++i)
      to[i] = static_cast<typename decltype(to)::value_type>(from[i]);
  };
  copy(s.text, out.i32("text"));
  copy(s.types, out.i32("types"));
  copy(s.labels, out.i32("labels"));
  copy(s.loss_mask, out.f32("loss_mask"));
  copy(s.padding_mask, out.i32("padding_mask"));
  out.i32("is_random")[0] = static_cast<std::int32_t>(s.is_random);
  out.i32("truncated")[0] = static_cast<std::int32_t>(s.truncated);
}

}  // namespace megatron::bert_data
