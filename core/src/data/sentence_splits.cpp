// SentenceSplits: the BERT/T5 splits as Megatron's BlendedMegatronDatasetBuilder builds them, on
// top of the shared blend rules of split_builder.h.
#include "megatron/data/sentence_splits.h"

#include <utility>

#include "megatron/data/rank_zero_first.h"
#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron::data {

namespace {

std::string split_text(Split split) {
  return std::string(split_name(split));
}

// The documents of `split` in one dataset (the source has data for the split).
ElementRange document_range(const SentenceDataset& source, const SplitSource& where, Split split) {
  const auto documents = static_cast<std::int64_t>(source.data.document_count());
  return split_element_range(*where.matrix[split_slot(split)], documents);
}

// Why a split of one dataset has no documents, for messages.
std::string document_share(const SentenceDataset& source, const SplitSource& where,
                           const std::optional<std::string>& split_string, ElementRange range) {
  if (where.per_split_blend) return "the dataset has no documents";
  return "split \"" + split_string.value_or("") + "\" gives it documents [" +
         std::to_string(range.begin) + ", " + std::to_string(range.end) + ") of " +
         std::to_string(source.data.document_count());
}

}  // namespace

SentenceSplits::SentenceSplits(const config::ConfigTable& table, BlendConfig blends, double surplus,
                               Logger& log, ParallelState& parallel)
    : table_(table), blends_(std::move(blends)), surplus_(surplus), log_(log), parallel_(parallel) {
  for (const PrefixUse& use : distinct_prefixes(blends_)) {
    auto dataset = std::make_unique<SentenceDataset>(
        SentenceDataset{use.prefix, use.key, IndexedDataset(use.prefix), {}, {}});
    dataset->sentence_lengths = dataset->data.sequence_lengths();
    dataset->document_indices = dataset->data.document_indices();
    datasets_.push_back(std::move(dataset));
  }
}

const SentenceDataset& SentenceSplits::dataset(const std::string& prefix) const {
  for (const auto& dataset : datasets_) {
    if (dataset->prefix == prefix) return *dataset;
  }
  throw Error("dataset " + prefix + " was not opened");
}

void SentenceSplits::build(const std::array<std::int64_t, 3>& num_samples,
                           const SentenceMappingBuilder& build) {
  build_rank_zero_first(parallel_, [&] {
    for (Split split : kSplits) {
      const std::int64_t wanted = num_samples[split_slot(split)];
      splits_[split_slot(split)] = wanted > 0 ? build_split(split, wanted, build) : SplitData{};
    }
  });
}

SentenceSplits::SplitData SentenceSplits::build_split(Split split, std::int64_t num_samples,
                                                      const SentenceMappingBuilder& build) const {
  Logger* talk = parallel_.world_rank() == 0 ? &log_ : nullptr;
  const SplitSource where = split_source(blends_, split);
  if (!check_split_has_data(table_, blends_, where, split, num_samples, talk)) return {};
  const BlendSpec& spec = *where.spec;
  if (!needs_blend_layer(spec.prefixes.size(), !spec.weights.empty(), where.per_split_blend)) {
    // A lone dataset whose share of the documents rounds to none (Megatron fails on it with an
    // IndexError): the train split is refused, the others are left empty.
    const SentenceDataset& only = dataset(spec.prefixes[0]);
    const ElementRange range = document_range(only, where, split);
    if (range.size() <= 0) {
      const std::string share = document_share(only, where, blends_.split, range);
      if (split == Split::kTrain) {
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
  SplitData out;
  SplitBlend blend =
      build_split_blend(table_, where, split, num_samples, surplus_, talk,
                        [&](std::size_t d, std::optional<std::int64_t> samples) {
                          out.constituents.push_back(build_constituent(
                              dataset(spec.prefixes[d]), where, split, samples, build));
                          return static_cast<std::int64_t>(out.constituents.back().mapping.rows());
                        });
  out.blend = std::move(blend.blend);
  out.size = blend.size;
  return out;
}

SentenceSplits::Constituent SentenceSplits::build_constituent(
    const SentenceDataset& source, const SplitSource& where, Split split,
    std::optional<std::int64_t> num_samples, const SentenceMappingBuilder& build) const {
  const std::string name = split_text(split);
  SentenceMappingRequest request;
  request.source = &source;
  request.documents = document_range(source, where, split);
  request.num_samples = num_samples;
  if (request.documents.size() <= 0) {
    table_.fail(where.spec->key,
                "the " + name + " split of " + source.prefix + " has no documents (" +
                    document_share(source, where, blends_.split, request.documents) +
                    ") but the blend asks for samples of it; give the split a larger share or "
                    "use more data");
  }
  request.identity.dataset_path = source.prefix;
  request.identity.split = split;
  if (!where.per_split_blend) {
    request.identity.split_string = blends_.split;
    request.identity.split_matrix = where.matrix;
  }
  SentenceMapping built;
  try {
    built = build(request);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw Error("the " + name + " split of " + source.prefix + ": " + e.what());
  }
  if (parallel_.world_rank() == 0 || built.built) {
    log_.log(parallel_.world_rank() == 0 ? spdlog::level::info : spdlog::level::warn,
             "data: {} split of {}: {} the sample index {} ({} samples from documents [{}, {}))",
             name, source.prefix, built.built ? "built" : "loaded",
             (built.built ? "into " : "from ") + built.cache_dir.string(), built.mapping.rows(),
             request.documents.begin, request.documents.end);
  }
  return {&source, std::move(built.mapping)};
}

std::int64_t SentenceSplits::size(Split split) const {
  return splits_[split_slot(split)].size;
}

SentenceSplits::Item SentenceSplits::locate(Split split, std::int64_t index) const {
  const SplitData& data = splits_[split_slot(split)];
  if (index < 0 || index >= data.size) {
    throw Error("sample " + std::to_string(index) + " of the " + split_text(split) +
                " split does not exist: it has " + std::to_string(data.size) + " samples");
  }
  const Constituent* constituent = &data.constituents[0];
  std::int64_t item = index;
  if (data.blend) {
    const auto at = static_cast<std::size_t>(index);
    constituent = &data.constituents[static_cast<std::size_t>(data.blend->dataset_index[at])];
    item = data.blend->dataset_sample_index[at];
  }
  return {constituent->source, &constituent->mapping, item};
}

}  // namespace megatron::data
