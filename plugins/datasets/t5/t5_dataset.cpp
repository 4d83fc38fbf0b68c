// Builds the splits as Megatron's BlendedMegatronDatasetBuilder does (each dataset's documents
// split by `split`, or per-split blends; the cached sample index of each MaskedWordPieceDataset;
// blends in Megatron's order) and serves samples as T5MaskedWordPieceDataset.__getitem__.
#include "t5_dataset.h"

#include <cmath>

#include "megatron/data/rank_zero_first.h"
#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron::t5_data {

namespace {

std::size_t slot(data::Split split) {
  return static_cast<std::size_t>(split);
}

std::string split_text(data::Split split) {
  return std::string(data::split_name(split));
}

// The documents of `split` in one dataset (the source has data for the split).
data::ElementRange document_range(const SentenceDataset& source, const data::SplitSource& where,
                                  data::Split split) {
  const auto documents = static_cast<std::int64_t>(source.data.document_count());
  return data::split_element_range(*where.matrix[slot(split)], documents);
}

// Why a split of one dataset has no documents, for messages.
std::string document_share(const SentenceDataset& source, const data::SplitSource& where,
                           const std::optional<std::string>& split_string,
                           data::ElementRange range) {
  if (where.per_split_blend) return "the dataset has no documents";
  return "split \"" + split_string.value_or("") + "\" gives it documents [" +
         std::to_string(range.begin) + ", " + std::to_string(range.end) + ") of " +
         std::to_string(source.data.document_count());
}

}  // namespace

T5Dataset::T5Dataset(PluginContext& context)
    : log_(context.log),
      parallel_(context.parallel),
      table_(context.config),
      options_(read_t5_data_options(context.config, context.core)) {
  try {
    tokenizer_ = make_tokenizer(options_.tokenizer_type, options_.tokenizer_files);
  } catch (const UsageError& e) {
    table_.fail("tokenizer_type", e.what());
  } catch (const Error& e) {
    table_.fail("vocab_file", e.what());
  }
  const bool talk = parallel_.world_rank() == 0;
  for (const data::PrefixUse& use : data::distinct_prefixes(options_.blends)) {
    auto dataset = std::make_unique<SentenceDataset>(
        SentenceDataset{use.prefix, IndexedDataset(use.prefix), {}, {}});
    // Megatron's T5 takes one sentence per sample at least, so a document-level file works, but
    // each of its documents becomes a single sample cut to its target length.
    if (talk && dataset->data.size() == dataset->data.document_count()) {
      log_.warn(
          "data: {} holds one sequence per document: each document gives one sample, cut to "
          "its target length; preprocess the corpus with --split-sentences to use all of it",
          use.prefix);
    }
    dataset->sentence_lengths = dataset->data.sequence_lengths();
    dataset->document_indices = dataset->data.document_indices();
    datasets_.push_back(std::move(dataset));
  }
  const auto vocab = static_cast<TokenId>(tokenizer_->vocab_size());
  std::vector<std::string> strings;
  for (TokenId id = 0; id < vocab; ++id)
    strings.push_back(tokenizer_->id_to_token(id));
  continues_word_ = data::continues_word_table(strings);
  for (const TokenId id : tokenizer_->additional_special_token_ids())
    sentinels_.push_back(id);
  auto special = [&](SpecialToken role, const char* name) -> std::int64_t {
    const auto id = tokenizer_->special_token(role);
    if (!id) table_.fail("tokenizer_type", std::string("the tokenizer has no ") + name + " token");
    return *id;
  };
  // T5 always masks with [MASK] internally, so no random-replacement lookup is needed.
  vocabulary_.wordpiece = {special(SpecialToken::cls, "[CLS]"),
                           special(SpecialToken::sep, "[SEP]"),
                           special(SpecialToken::pad, "[PAD]"),
                           special(SpecialToken::mask, "[MASK]"),
                           continues_word_,
                           {}};
  vocabulary_.bos = special(SpecialToken::bos, "[BOS]");
  vocabulary_.eos = special(SpecialToken::eos, "[EOS]");
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

const SentenceDataset& T5Dataset::sentences(const std::string& prefix) const {
  for (const auto& dataset : datasets_) {
    if (dataset->prefix == prefix) return *dataset;
  }
  throw Error("dataset " + prefix + " was not opened");
}

SampleSpec T5Dataset::sample_fields() const {
  const Shape encoder{options_.sample.encoder_length};
  const Shape decoder{options_.sample.decoder_length};
  return {{"text_enc", DType::i32, encoder, FieldKind::token_ids},
          {"text_dec", DType::i32, decoder, FieldKind::token_ids},
          {"labels", DType::i32, decoder, FieldKind::labels},
          {"loss_mask", DType::f32, decoder, FieldKind::mask},
          {"truncated", DType::i32, {}, FieldKind::value},
          {"enc_mask", DType::i32, encoder, FieldKind::mask},
          {"dec_mask", DType::i32, decoder, FieldKind::mask}};
}

void T5Dataset::build(const std::array<std::int64_t, 3>& num_samples) {
  data::build_rank_zero_first(parallel_, [&] {
    for (data::Split split : data::kSplits) {
      const std::int64_t wanted = num_samples[slot(split)];
      splits_[slot(split)] = wanted > 0 ? build_split(split, wanted) : SplitDataset{};
    }
  });
}

SplitDataset T5Dataset::build_split(data::Split split, std::int64_t num_samples) const {
  Logger* talk = parallel_.world_rank() == 0 ? &log_ : nullptr;
  const data::SplitSource where = data::split_source(options_.blends, split);
  if (!data::check_split_has_data(table_, options_.blends, where, split, num_samples, talk)) {
    return {};
  }
  const data::BlendSpec& spec = *where.spec;
  if (!data::needs_blend_layer(spec.prefixes.size(), !spec.weights.empty(),
                               where.per_split_blend)) {
    // A lone dataset whose share of the documents rounds to none (Megatron fails on it with an
    // IndexError): the train split is refused, the others are left empty.
    const SentenceDataset& only = sentences(spec.prefixes[0]);
    const data::ElementRange range = document_range(only, where, split);
    if (range.size() <= 0) {
      const std::string share = document_share(only, where, options_.blends.split, range);
      if (split == data::Split::kTrain) {
        table_.fail(where.per_split_blend ? spec.key : "split",
                    "the train split of " + only.prefix + " has no documents (" + share +
                        ") but the schedule trains on " + std::to_string(num_samples) + " samples");
      }
      if (talk) {
        talk->warn(
            "data: the {} split of {} has no documents ({}) but the schedule asks for {} "
            "samples; it is left empty",
            split_text(split), only.prefix, share, num_samples);
      }
      return {};
    }
  }
  SplitDataset out;
  data::SplitBlend blend = data::build_split_blend(
      table_, where, split, num_samples, options_.mid_level_dataset_surplus, talk,
      [&](std::size_t d, std::optional<std::int64_t> samples) {
        out.constituents.push_back(
            build_masked(sentences(spec.prefixes[d]), where, split, samples));
        return static_cast<std::int64_t>(out.constituents.back().mapping.rows());
      });
  out.blend = std::move(blend.blend);
  out.size = blend.size;
  return out;
}

MaskedDataset T5Dataset::build_masked(const SentenceDataset& source, const data::SplitSource& where,
                                      data::Split split,
                                      std::optional<std::int64_t> num_samples) const {
  const std::string name = split_text(split);
  const data::ElementRange range = document_range(source, where, split);
  if (range.size() <= 0) {
    table_.fail(where.spec->key,
                "the " + name + " split of " + source.prefix + " has no documents (" +
                    document_share(source, where, options_.blends.split, range) +
                    ") but the blend asks for samples of it; give the split a larger share or "
                    "use more data");
  }
  data::GptDatasetIdentity identity;
  identity.dataset_path = source.prefix;
  identity.split = split;
  if (!where.per_split_blend) {
    identity.split_string = options_.blends.split;
    identity.split_matrix = where.matrix;
  }
  identity.tokenizer = data::wordpiece_tokenizer_identity(
      options_.tokenizer_type == "BertWordPieceLowerCase", options_.tokenizer_files.vocab_file,
      options_.tokenizer_files.vocab_extra_ids);
  const std::filesystem::path cache_dir =
      options_.data_cache_path
          ? std::filesystem::path(*options_.data_cache_path)
          : data::default_masked_cache_dir(source.prefix, data::kT5DatasetClass);
  bool built = false;
  MaskedDataset masked{&source, {}};
  try {
    masked.mapping = data::load_or_build_t5_sample_mapping(
        cache_dir, identity, options_.sample, num_samples, source.document_indices, range.begin,
        range.end, source.sentence_lengths, &built);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw Error("the " + name + " split of " + source.prefix + ": " + e.what());
  }
  if (parallel_.world_rank() == 0 || built) {
    log_.log(parallel_.world_rank() == 0 ? spdlog::level::info : spdlog::level::warn,
             "data: {} split of {}: {} the sample index {} ({} samples from documents [{}, {}))",
             name, source.prefix, built ? "built" : "loaded",
             (built ? "into " : "from ") + cache_dir.string(), masked.mapping.rows(), range.begin,
             range.end);
  }
  return masked;
}

std::int64_t T5Dataset::size(data::Split split) const {
  return splits_[slot(split)].size;
}

void T5Dataset::get(data::Split split, std::int64_t index, const SampleSlots& out) const {
  const SplitDataset& dataset = splits_[slot(split)];
  if (index < 0 || index >= dataset.size) {
    throw Error("sample " + std::to_string(index) + " of the " + split_text(split) +
                " split does not exist: it has " + std::to_string(dataset.size) + " samples");
  }
  // A blended sample is its constituent's sample, seeded by its index there, as BlendedDataset
  // hands Megatron's __getitem__ the dataset_sample_index.
  const MaskedDataset* masked = &dataset.constituents[0];
  std::int64_t item = index;
  if (dataset.blend) {
    const auto at = static_cast<std::size_t>(index);
    masked = &dataset.constituents[static_cast<std::size_t>(dataset.blend->dataset_index[at])];
    item = dataset.blend->dataset_sample_index[at];
  }
  data::T5Sample s;
  try {
    s = data::make_t5_sample(masked->source->data, masked->mapping, item, options_.sample,
                             vocabulary_);
  } catch (const Error& e) {
    throw Error("the " + split_text(split) + " split of " + masked->source->prefix + ": " +
                e.what());
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
