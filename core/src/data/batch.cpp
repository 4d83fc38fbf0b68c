// Named sample fields and micro-batches: lookup, the model/dataset field check, allocation.
#include "megatron/batch.h"

#include <fmt/format.h>

#include "megatron/error.h"

namespace megatron {

const FieldSpec* find_field(const SampleSpec& spec, std::string_view name) {
  for (const FieldSpec& f : spec) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string describe_fields(const SampleSpec& spec) {
  std::string out;
  for (const FieldSpec& f : spec) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} ({} {})", f.name, dtype_name(f.dtype), shape_str(f.shape));
  }
  return out.empty() ? "no fields" : out;
}

void check_sample_fields(const SampleSpec& needed, std::string_view model_name,
                         const SampleSpec& provided, std::string_view data_name) {
  for (const FieldSpec& want : needed) {
    const FieldSpec* have = find_field(provided, want.name);
    const std::string who = fmt::format("[model] type = \"{}\" needs the sample field '{}' ({})",
                                        model_name, want.name, dtype_name(want.dtype));
    if (!have) {
      if (want.optional) continue;  // the model works without it
      throw ConfigError(
          fmt::format("{}, which [data] type = \"{}\" does not provide (it provides {})", who,
                      data_name, describe_fields(provided)));
    }
    if (have->dtype != want.dtype || (!want.shape.empty() && have->shape != want.shape)) {
      throw ConfigError(fmt::format("{} {}, but [data] type = \"{}\" provides it as {} {}", who,
                                    shape_str(want.shape), data_name, dtype_name(have->dtype),
                                    shape_str(have->shape)));
    }
  }
}

const Tensor& named_tensor(const NamedTensors& tensors, std::string_view name,
                           std::string_view what) {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  std::string names;
  for (const auto& [n, t] : tensors)
    names += (names.empty() ? "" : ", ") + n;
  throw Error(fmt::format("{} have no tensor '{}' (they have {})", what, name,
                          names.empty() ? "none" : names));
}

std::size_t SampleSlots::index_of(std::string_view name, DType dtype) const {
  for (std::size_t i = 0; i < spec_->size(); ++i) {
    const FieldSpec& f = (*spec_)[i];
    if (f.name != name) continue;
    if (f.dtype != dtype) {
      throw Error(fmt::format("sample field '{}' is {}, read as {}", f.name, dtype_name(f.dtype),
                              dtype_name(dtype)));
    }
    return i;
  }
  throw Error(
      fmt::format("no sample field '{}' (the sample has {})", name, describe_fields(*spec_)));
}

Batch Batch::allocate(const SampleSpec& spec, std::int64_t samples) {
  Batch b;
  b.spec_ = spec;
  b.samples_ = samples;
  for (const FieldSpec& f : spec) {
    Shape shape{samples};
    shape.insert(shape.end(), f.shape.begin(), f.shape.end());
    b.fields_.emplace_back(f.name, Tensor::empty(shape, f.dtype));
  }
  return b;
}

SampleSlots Batch::sample(std::int64_t i) {
  if (i < 0 || i >= samples_) {
    throw Error(fmt::format("batch sample {} of {}", i, samples_));
  }
  std::vector<void*> data;
  for (std::size_t k = 0; k < spec_.size(); ++k) {
    const Tensor& t = fields_[k].second;
    const auto per_sample = static_cast<std::size_t>(shape_numel(spec_[k].shape));
    data.push_back(static_cast<char*>(t.raw_data()) +
                   static_cast<std::size_t>(i) * per_sample * t.element_size());
  }
  return SampleSlots(spec_, std::move(data));
}

const Tensor& Batch::operator[](std::string_view name) const {
  return named_tensor(fields_, name, "the micro-batch's fields");
}

bool Batch::has(std::string_view name) const {
  for (const auto& [n, t] : fields_) {
    if (n == name) return true;
  }
  return false;
}

void Batch::set(std::string name, Tensor value) {
  if (fields_.empty() && spec_.empty()) samples_ = value.dim() > 0 ? value.size(0) : 0;
  for (auto& [n, t] : fields_) {
    if (n == name) {
      t = std::move(value);
      return;
    }
  }
  fields_.emplace_back(std::move(name), std::move(value));
}

}  // namespace megatron
