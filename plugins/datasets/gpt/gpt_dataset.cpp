// Builds the splits as Megatron's BlendedMegatronDatasetBuilder does and serves samples as
// GPTDataset.__getitem__ does (tokens, labels shifted by one, loss mask).
#include "gpt_dataset.h"

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "megatron/data/rank_zero_first.h"
#include "megatron/data/split_builder.h"
#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/tokenizer/sentencepiece_tokenizer.h"

namespace megatron::gpt_data {

namespace {

// Megatron's _PAD_TOKEN_ID, GPTDataset's pad id when the tokenizer has none (GPT-2's has none).
// Padding only ever appears in a kept last partial sample of the valid split.
constexpr std::int32_t kPadToken = -1;

std::size_t slot(data::Split split) {
  return static_cast<std::size_t>(split);
}

std::string split_text(data::Split split) {
  return std::string(data::split_name(split));
}

// Megatron's tokenizer unique_identifiers: the class name and the files, in its argument order,
// then its keyword options.
data::TokenizerIdentity tokenizer_identity(const GptDataOptions& options) {
  data::TokenizerIdentity identity;
  if (is_sentencepiece_tokenizer_type(options.tokenizer_type)) {
    // _GPTSentencePieceTokenizer passes vocab_extra_ids=0 to _SentencePieceTokenizer, which
    // passes it on, so both record it; this table has no vocab_extra_ids key, hence "0".
    identity.class_name = "_" + options.tokenizer_type;
    identity.paths = {options.tokenizer_files.tokenizer_model};
    identity.options = {{"vocab_extra_ids", "0"}};
    return identity;
  }
  if (options.tokenizer_type == "NullTokenizer") {
    // NullTokenizer's unique_identifiers: its class, vocab_size, eod_id and pad_id.
    const std::int64_t v = options.tokenizer_files.vocab_size;
    identity.class_name = "NullTokenizer";
    identity.options = {
        {"vocab_size", std::to_string(v)}, {"eod_id", std::to_string(v - 1)}, {"pad_id", "-1"}};
    return identity;
  }
  identity.class_name = options.tokenizer_type == "GPT2BPETokenizer" ? "_GPT2BPETokenizer"
                                                                     : "_" + options.tokenizer_type;
  for (const std::string& file :
       {options.tokenizer_files.vocab_file, options.tokenizer_files.merge_file}) {
    if (!file.empty()) identity.paths.push_back(file);
  }
  return identity;
}

}  // namespace

std::unique_ptr<Tokenizer> open_gpt_tokenizer(const config::ConfigTable& table,
                                              const GptDataOptions& options) {
  try {
    return make_tokenizer(options.tokenizer_type, options.tokenizer_files);
  } catch (const UsageError& e) {
    table.fail("tokenizer_type", e.what());
  } catch (const Error& e) {
    // A SentencePiece model that cannot be loaded is the fault of the one key naming it.
    if (is_sentencepiece_tokenizer_type(options.tokenizer_type)) {
      table.fail("tokenizer_model", e.what());
    }
    throw;
  }
}

SampleSpec gpt_sample_fields(const GptDataOptions& options) {
  const Shape s{options.seq_length};
  SampleSpec fields = {{"tokens", DType::i32, s, FieldKind::token_ids},
                       {"labels", DType::i32, s, FieldKind::labels},
                       {"loss_mask", DType::f32, s, FieldKind::mask}};
  if (options.reset_position_ids) fields.push_back({"position_ids", DType::i32, s});
  // Megatron's (1, s, s) block-lower-triangular mask in O(s): row i of it is true (masked) before
  // attention_mask[i] and after i.
  if (options.reset_attention_mask) fields.push_back({"attention_mask", DType::i32, s});
  return fields;
}

GptDataset::GptDataset(PluginContext& context)
    : log_(context.log),
      parallel_(context.parallel),
      table_(context.config),
      options_(read_gpt_data_options(context.config, context.core)) {
  tokenizer_ = open_gpt_tokenizer(table_, options_);
  // GPTDataset takes tokenizer.pad when the tokenizer has one (SentencePieceTokenizer always
  // does, GPTSentencePieceTokenizer when the model has a pad piece), else _PAD_TOKEN_ID.
  pad_token_ = tokenizer_->special_token(SpecialToken::pad).value_or(kPadToken);
  for (const data::PrefixUse& use : data::distinct_prefixes(options_.blends)) {
    auto dataset = std::make_unique<LowLevelDataset>(
        LowLevelDataset{use.prefix, IndexedDataset(use.prefix), {}});
    // GPTDataset reads every sequence as a document; sentence-level files (several sequences
    // per document) are BERT's and T5's input and would lose their document boundaries here.
    if (dataset->data.size() > dataset->data.document_count()) {
      table_.fail(use.key, "dataset " + use.prefix + " holds " +
                               std::to_string(dataset->data.size()) + " sequences in " +
                               std::to_string(dataset->data.document_count()) +
                               " documents: sentence-level data (preprocess "
                               "--split-sentences) is for the bert dataset; GPT needs one "
                               "sequence per document (preprocess without --split-sentences)");
    }
    dataset->sequence_lengths = dataset->data.sequence_lengths();
    low_level_.push_back(std::move(dataset));
  }
}

const LowLevelDataset& GptDataset::low_level(const std::string& prefix) const {
  for (const auto& dataset : low_level_) {
    if (dataset->prefix == prefix) return *dataset;
  }
  throw Error("dataset " + prefix + " was not opened");
}

void GptDataset::build(const std::array<std::int64_t, 3>& num_samples) {
  for (data::Split split : data::kSplits) {
    if (num_samples[slot(split)] < 0) {
      throw Error("the " + split_text(split) + " split was asked for " +
                  std::to_string(num_samples[slot(split)]) + " samples");
    }
  }
  data::build_rank_zero_first(parallel_, [&] { build_here(num_samples); });
}

void GptDataset::build_here(const std::array<std::int64_t, 3>& num_samples) {
  for (data::Split split : data::kSplits) {
    const std::int64_t wanted = num_samples[slot(split)];
    splits_[slot(split)] = wanted > 0 ? build_split(split, wanted) : SplitDataset{};
  }
}

SplitDataset GptDataset::build_split(data::Split split, std::int64_t num_samples) const {
  Logger* talk = parallel_.world_rank() == 0 ? &log_ : nullptr;
  const data::SplitSource source = data::split_source(options_.blends, split);
  if (!data::check_split_has_data(table_, options_.blends, source, split, num_samples, talk)) {
    return {};
  }
  SplitDataset out;
  data::SplitBlend blend = data::build_split_blend(
      table_, source, split, num_samples, options_.mid_level_dataset_surplus, talk,
      [&](std::size_t d, std::optional<std::int64_t> samples) {
        out.constituents.push_back(build_mid_level(low_level(source.spec->prefixes[d]),
                                                   *source.spec, split, source.matrix,
                                                   source.per_split_blend, samples));
        return out.constituents.back().indices.size();
      });
  out.blend = std::move(blend.blend);
  out.size = blend.size;
  return out;
}

MidLevelDataset GptDataset::build_mid_level(const LowLevelDataset& source, const BlendSpec& spec,
                                            data::Split split, const data::SplitMatrix& matrix,
                                            bool per_split_blend,
                                            std::optional<std::int64_t> num_samples) const {
  const auto elements = static_cast<std::int64_t>(source.sequence_lengths.size());
  const data::ElementRange range = data::split_element_range(*matrix[slot(split)], elements);
  if (range.size() <= 0) {
    const std::string share =
        per_split_blend ? std::string("the dataset has no sequences")
                        : "split \"" + *options_.blends.split + "\" gives it sequences [" +
                              std::to_string(range.begin) + ", " + std::to_string(range.end) +
                              ") of " + std::to_string(elements);
    table_.fail(spec.key, "the " + split_text(split) + " split of " + source.prefix +
                              " is empty (" + share +
                              ") but the schedule asks for samples of "
                              "it; give the split a larger share or use more data");
  }
  std::vector<std::int32_t> ids(static_cast<std::size_t>(range.size()));
  std::iota(ids.begin(), ids.end(), static_cast<std::int32_t>(range.begin));

  data::GptDatasetIdentity identity;
  identity.dataset_path = source.prefix;
  identity.split = split;
  if (!per_split_blend) {
    identity.split_string = options_.blends.split;
    identity.split_matrix = matrix;
  }
  identity.tokenizer = tokenizer_identity(options_);

  data::GptIndexOptions index_options;
  index_options.sequence_length = options_.seq_length;
  index_options.num_samples = num_samples;
  index_options.seed = options_.seed;
  index_options.add_extra_token = true;
  index_options.drop_last_partial_sequence =
      split != data::Split::kValid || options_.drop_last_partial_validation_sequence;

  const std::filesystem::path cache_dir = options_.data_cache_path
                                              ? std::filesystem::path(*options_.data_cache_path)
                                              : data::default_gpt_cache_dir(source.prefix);
  bool built = false;
  MidLevelDataset mid{&source, {}};
  try {
    mid.indices = data::load_or_build_gpt_indices(cache_dir, identity, ids, source.sequence_lengths,
                                                  index_options, &built);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw Error("the " + split_text(split) + " split of " + source.prefix + ": " + e.what());
  }
  const bool talk = parallel_.world_rank() == 0;
  if (talk || built) {
    log_.log(talk ? spdlog::level::info : spdlog::level::warn,
             "data: {} split of {}: {} the indices {} ({} samples from {} sequences, {} epoch(s))",
             split_text(split), source.prefix, built ? "built" : "loaded",
             built ? "into " + cache_dir.string() : "from " + cache_dir.string(),
             mid.indices.size(), ids.size(), mid.indices.num_epochs);
  }
  return mid;
}

std::int64_t GptDataset::size(data::Split split) const {
  return splits_[slot(split)].size;
}

SampleSpec GptDataset::sample_fields() const {
  return gpt_sample_fields(options_);
}

GptDataset::Located GptDataset::locate(data::Split split, std::int64_t index) const {
  const SplitDataset& dataset = splits_[slot(split)];
  if (index < 0 || index >= dataset.size) {
    throw Error("sample " + std::to_string(index) + " of the " + split_text(split) +
                " split does not exist: it has " + std::to_string(dataset.size) + " samples");
  }
  if (!dataset.blend) return {&dataset.constituents[0], index};
  const auto at = static_cast<std::size_t>(index);
  return {&dataset.constituents[static_cast<std::size_t>(dataset.blend->dataset_index[at])],
          dataset.blend->dataset_sample_index[at]};
}

GptDataset::SampleSource GptDataset::sample_source(data::Split split, std::int64_t index) const {
  const auto [mid, item] = locate(split, index);
  SampleSource source{mid->source->prefix, {}};
  for (const data::SamplePiece& piece :
       mid->indices.sample_pieces(item, mid->source->sequence_lengths))
    source.sequence_ids.push_back(piece.sequence_id);
  return source;
}

void GptDataset::get(data::Split split, std::int64_t index, const SampleSlots& out) const {
  const std::span<std::int32_t> tokens = out.i32("tokens"), labels = out.i32("labels");
  const std::span<float> loss_mask = out.f32("loss_mask");
  const auto [mid, item] = locate(split, index);
  const auto length = static_cast<std::size_t>(options_.seq_length);
  if (tokens.size() != length || labels.size() != length || loss_mask.size() != length) {
    throw Error("a sample has seq_length " + std::to_string(length) +
                " tokens, labels and loss-mask entries; got " + std::to_string(tokens.size()) +
                ", " + std::to_string(labels.size()) + " and " + std::to_string(loss_mask.size()));
  }
  // The sample's seq_length + 1 tokens (the last one is only a label), padded when short.
  std::vector<std::int32_t> text(length + 1, pad_token_);
  std::size_t filled = 0;
  for (const data::SamplePiece& piece :
       mid->indices.sample_pieces(item, mid->source->sequence_lengths)) {
    const auto count = static_cast<std::size_t>(piece.length);
    if (count > text.size() - filled) {
      throw Error("the indices of " + mid->source->prefix + " give sample " + std::to_string(item) +
                  " more than seq_length + 1 tokens");
    }
    mid->source->data.read(static_cast<std::size_t>(piece.sequence_id),
                           static_cast<std::size_t>(piece.offset),
                           std::span<std::int32_t>(text).subspan(filled, count));
    filled += count;
  }

  // GPTDataset.__getitem__ with _get_ltor_masks_and_position_ids: the EOD mask looks at the
  // input tokens, the padding mask at the labels; padding ids then become 0.
  const TokenId eod = tokenizer_->eod();
  for (std::size_t i = 0; i < length; ++i) {
    const std::int32_t input = text[i];
    const std::int32_t label = text[i + 1];
    float mask = 1.0f;
    if (options_.eod_mask_loss && input == eod) mask = 0.0f;
    if (label == pad_token_) mask = 0.0f;
    tokens[i] = input == pad_token_ ? 0 : input;
    labels[i] = label == pad_token_ ? 0 : label;
    loss_mask[i] = mask;
  }
  if (options_.reset_position_ids || options_.reset_attention_mask) {
    write_document_fields(std::span<const std::int32_t>(text).first(length), eod, out);
  }
}

void GptDataset::write_document_fields(std::span<const std::int32_t> inputs, TokenId eod,
                                       const SampleSlots& out) const {
  // _get_ltor_masks_and_position_ids: after an EOD at i, positions restart (position_ids[i + 1:]
  // -= i + 1 - previous start) and later tokens see nothing up to i (mask[i + 1:, :i + 1] = 0).
  // Both follow from the start of each token's document: the position after the last EOD before
  // it (the EOD itself belongs to the document it ends).
  std::span<std::int32_t> positions, first_key;
  if (options_.reset_position_ids) positions = out.i32("position_ids");
  if (options_.reset_attention_mask) first_key = out.i32("attention_mask");
  std::int32_t start = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto index = static_cast<std::int32_t>(i);
    if (!positions.empty()) positions[i] = index - start;
    if (!first_key.empty()) first_key[i] = start;
    if (inputs[i] == eod) start = index + 1;
  }
}

}  // namespace megatron::gpt_data
