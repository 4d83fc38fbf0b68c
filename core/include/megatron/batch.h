// Named data between dataset, trainer and model: the fields a dataset declares for each sample,
// a sample's storage as the dataset fills it, and a micro-batch of them as host tensors. The
// trainer batches and ships fields without knowing their names.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megatron/tensor/tensor.h"

namespace megatron {

// How a field is read by people and tools (`megatron-app data`), not by the model's arithmetic.
enum class FieldKind {
  token_ids,  // ids of the dataset's tokenizer (`data --text` decodes them)
  labels,     // target ids; a negative id means no target at that position
  mask,       // 0/1 per position
  value,      // anything else (a class label, position ids...)
};

// One field of a sample: its name, element type and shape ({} for a scalar).
struct FieldSpec {
  std::string name;
  DType dtype = DType::i32;
  Shape shape;
  FieldKind kind = FieldKind::value;
  // In a model's input_fields: used when the dataset provides it (e.g. GPT's position_ids), not
  // required. Datasets leave it false.
  bool optional = false;
  // In a model's input_fields: under context parallelism every rank gets the whole field (a
  // padding mask over the keys), not its chunks of the sequence. Datasets leave it false.
  bool whole_sequence = false;
  bool operator==(const FieldSpec&) const = default;
};
using SampleSpec = std::vector<FieldSpec>;

// nullptr when `spec` has no field `name`.
const FieldSpec* find_field(const SampleSpec& spec, std::string_view name);
// "tokens (int32 [128]), labels (int32 [128])".
std::string describe_fields(const SampleSpec& spec);

// Refuses, before any work, a model whose inputs the dataset does not provide: every field of
// `needed` must be in `provided` (unless it is optional) with the same dtype (and the same shape
// where `needed` gives one). Throws ConfigError naming both plugins, the field and what the dataset
// has instead.
void check_sample_fields(const SampleSpec& needed, std::string_view model_name,
                         const SampleSpec& provided, std::string_view data_name);

// Tensors by name, in a fixed order: pipeline activations, a batch's fields.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// The tensor called `name`; throws Error naming `what` (e.g. "the activations") and the names
// there are.
const Tensor& named_tensor(const NamedTensors& tensors, std::string_view name,
                           std::string_view what);

// One sample's storage: a span per declared field, which Dataset::get fills.
class SampleSlots {
 public:
  SampleSlots(const SampleSpec& spec, std::vector<void*> data)
      : spec_(&spec), data_(std::move(data)) {}

  // The field's elements; throws Error when there is no such field or T is not its dtype.
  template <typename T>
  std::span<T> get(std::string_view name) const {
    const std::size_t i = index_of(name, dtype_of_v<T>);
    return {static_cast<T*>(data_[i]), static_cast<std::size_t>(shape_numel((*spec_)[i].shape))};
  }
  std::span<std::int32_t> i32(std::string_view name) const { return get<std::int32_t>(name); }
  std::span<std::int64_t> i64(std::string_view name) const { return get<std::int64_t>(name); }
  std::span<float> f32(std::string_view name) const { return get<float>(name); }
  std::span<std::uint8_t> u8(std::string_view name) const { return get<std::uint8_t>(name); }
  const SampleSpec& spec() const { return *spec_; }

 private:
  std::size_t index_of(std::string_view name, DType dtype) const;
  const SampleSpec* spec_;
  std::vector<void*> data_;
};

// A micro-batch: per field, a host tensor (B, field shape...) in the dataset's declared order.
class Batch {
 public:
  Batch() = default;
  // Storage for `samples` samples of every field of `spec`.
  static Batch allocate(const SampleSpec& spec, std::int64_t samples);

  // Slots of sample i (fill through Dataset::get).
  SampleSlots sample(std::int64_t i);
  // The field's tensor; throws Error naming the field and the fields the batch has.
  const Tensor& operator[](std::string_view name) const;
  bool has(std::string_view name) const;
  // Adds or replaces a field (models and tests building batches by hand).
  void set(std::string name, Tensor value);
  std::int64_t size() const { return samples_; }
  const NamedTensors& fields() const { return fields_; }

 private:
  SampleSpec spec_;
  std::int64_t samples_ = 0;
  NamedTensors fields_;
};

}  // namespace megatron
