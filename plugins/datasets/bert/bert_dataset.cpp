// Builds the splits' sentence mappings as MaskedWordPieceDataset does (documents split by
// `split`, cached sample index) and serves samples as BERTMaskedWordPieceDataset.__getitem__.
#include "bert_dataset.h"

#include <numeric>

#include "megatron/data/rank_zero_first.h"
#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron::bert_data {

namespace {

std::size_t slot(data::Split split) {
  return static_cast<std::size_t>(split);
}

// Megatron's _BertWordPieceTokenizer identity: its class, vocab file, and options in its order,
// each stored as Python's str() of the value (MegatronTokenizer.__init__), so "True" and "0".
data::TokenizerIdentity tokenizer_identity(const BertDataOptions& o) {
  data::TokenizerIdentity identity;
  identity.class_name = "_BertWordPieceTokenizer";
  identity.paths = {o.tokenizer_files.vocab_file};
  const bool lower = o.tokenizer_type == "BertWordPieceLowerCase";
  identity.options = {{"lower_case", lower ? "True" : "False"},
                      {"vocab_extra_ids", std::to_string(o.tokenizer_files.vocab_extra_ids)}};
  return identity;
}

}  // namespace

BertDataset::BertDataset(PluginContext& context)
    : log_(context.log),
      parallel_(context.parallel),
      table_(context.config),
      options_(read_bert_data_options(context.config, context.core)) {
  try {
    tokenizer_ = make_tokenizer(options_.tokenizer_type, options_.tokenizer_files);
  } catch (const UsageError& e) {
    table_.fail("tokenizer_type", e.what());
  } catch (const Error& e) {
    table_.fail("vocab_file", e.what());
  }
  data_ = std::make_unique<IndexedDataset>(options_.prefix);
  sentence_lengths_ = data_->sequence_lengths();
  document_indices_ = data_->document_indices();
  // build_mapping pairs sentences within documents; a document-level file (one sequence per
  // document) has none to pair.
  if (data_->size() == data_->document_count()) {
    table_.fail("data_path", "dataset " + options_.prefix + " holds one sequence per document (" +
                                 std::to_string(data_->size()) +
                                 "): BERT samples are made of sentences; preprocess the corpus "
                                 "with --split-sentences (its files end in _sentence)");
  }
  const auto vocab = static_cast<TokenId>(tokenizer_->vocab_size());
  std::vector<std::string> strings;
  for (TokenId id = 0; id < vocab; ++id)
    strings.push_back(tokenizer_->id_to_token(id));
  continues_word_ = data::continues_word_table(strings);
  token_lookup_.resize(static_cast<std::size_t>(vocab));
  std::iota(token_lookup_.begin(), token_lookup_.end(), 0);
  auto special = [&](SpecialToken role, const char* name) -> std::int64_t {
    const auto id = tokenizer_->special_token(role);
    if (!id) table_.fail("tokenizer_type", std::string("the tokenizer has no ") + name + " token");
    return *id;
  };
  vocabulary_ = {special(SpecialToken::cls, "[CLS]"),
                 special(SpecialToken::sep, "[SEP]"),
                 special(SpecialToken::pad, "[PAD]"),
                 special(SpecialToken::mask, "[MASK]"),
                 continues_word_,
                 token_lookup_};
  data::check_masking_options(options_.sample.masking);
}

SampleSpec BertDataset::sample_fields() const {
  const Shape s{options_.sample.sequence_length};
  return {{"text", DType::i32, s, FieldKind::token_ids},
          {"types", DType::i32, s, FieldKind::value},
          {"labels", DType::i32, s, FieldKind::labels},
          {"loss_mask", DType::f32, s, FieldKind::mask},
          {"padding_mask", DType::i32, s, FieldKind::mask},
          {"is_random", DType::i32, {}, FieldKind::value},
          {"truncated", DType::i32, {}, FieldKind::value}};
}

void BertDataset::build(const std::array<std::int64_t, 3>& num_samples) {
  data::build_rank_zero_first(parallel_, [&] {
    for (data::Split split : data::kSplits) {
      const std::int64_t wanted = num_samples[slot(split)];
      mappings_[slot(split)] = wanted > 0 ? build_split(split, wanted) : data::IndexArray{};
      sizes_[slot(split)] =
          wanted > 0 ? static_cast<std::int64_t>(mappings_[slot(split)].rows()) : 0;
    }
  });
}

data::IndexArray BertDataset::build_split(data::Split split, std::int64_t num_samples) const {
  const std::string name(data::split_name(split));
  const auto& bookends = options_.split_matrix[slot(split)];
  const auto documents = static_cast<std::int64_t>(data_->document_count());
  const data::ElementRange range =
      bookends ? data::split_element_range(*bookends, documents) : data::ElementRange{};
  if (range.size() <= 0) {
    if (split == data::Split::kTrain) {
      table_.fail("split", "the train split of " + options_.prefix + " has no documents (split \"" +
                               options_.split + "\") but the schedule trains on " +
                               std::to_string(num_samples) + " samples");
    }
    log_.warn(
        "data: the {} split has no documents but the schedule asks for {} samples; it is "
        "left empty",
        name, num_samples);
    return {};
  }
  data::GptDatasetIdentity identity;
  identity.dataset_path = options_.prefix;
  identity.split = split;
  identity.split_string = options_.split;
  identity.split_matrix = options_.split_matrix;
  identity.tokenizer = tokenizer_identity(options_);
  const std::filesystem::path cache_dir = options_.data_cache_path
                                              ? std::filesystem::path(*options_.data_cache_path)
                                              : data::default_bert_cache_dir(options_.prefix);
  bool built = false;
  data::IndexArray mapping;
  try {
    mapping = data::load_or_build_bert_sample_mapping(cache_dir, identity, options_.sample,
                                                      num_samples, document_indices_, range.begin,
                                                      range.end, sentence_lengths_, &built);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw Error("the " + name + " split of " + options_.prefix + ": " + e.what());
  }
  if (parallel_.world_rank() == 0 || built) {
    log_.log(parallel_.world_rank() == 0 ? spdlog::level::info : spdlog::level::warn,
             "data: {} split of {}: {} the sample index {} ({} samples from documents [{}, {}))",
             name, options_.prefix, built ? "built" : "loaded",
             (built ? "into " : "from ") + cache_dir.string(), mapping.rows(), range.begin,
             range.end);
  }
  return mapping;
}

std::int64_t BertDataset::size(data::Split split) const {
  return sizes_[slot(split)];
}

void BertDataset::get(data::Split split, std::int64_t index, const SampleSlots& out) const {
  if (index < 0 || index >= sizes_[slot(split)]) {
    throw Error("sample " + std::to_string(index) + " of the " +
                std::string(data::split_name(split)) + " split does not exist: it has " +
                std::to_string(sizes_[slot(split)]) + " samples");
  }
  const data::BertSample s =
      data::make_bert_sample(*data_, mappings_[slot(split)], index, options_.sample, vocabulary_);
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
