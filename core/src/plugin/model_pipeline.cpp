// Model's optional pipeline-parallel interface (what a model that does not implement it answers)
// and the arithmetic of named losses.
#include <algorithm>
#include <cstring>

#include "megatron/error.h"
#include "megatron/model.h"

namespace megatron {

namespace {

// `first` then `second` along dim 0 (host tensors of equal trailing shape and dtype).
Tensor stack_rows(const Tensor& first, const Tensor& second, const std::string& name) {
  if (first.dtype() != second.dtype() || first.dim() != second.dim() || first.dim() == 0 ||
      !std::equal(first.shape().begin() + 1, first.shape().end(), second.shape().begin() + 1) ||
      first.device() != Device::cpu() || second.device() != Device::cpu()) {
    throw Error("step output '" + name + "': cannot stack " + second.describe() + " after " +
                first.describe());
  }
  Shape shape = first.shape();
  shape[0] += second.size(0);
  Tensor out = Tensor::empty(shape, first.dtype());
  const Tensor a = first.contiguous(), b = second.contiguous();
  const std::size_t a_bytes = static_cast<std::size_t>(a.numel()) * dtype_size(a.dtype());
  std::memcpy(out.raw_data(), a.raw_data(), a_bytes);
  std::memcpy(static_cast<char*>(out.raw_data()) + a_bytes, b.raw_data(),
              static_cast<std::size_t>(b.numel()) * dtype_size(b.dtype()));
  return out;
}

[[noreturn]] void no_pipeline(const char* what) {
  throw ConfigError(std::string("this [model] plugin does not support pipeline parallelism (it "
                                "has no ") +
                    what + "); set [parallel] pipeline_model_parallel_size = 1");
}
}  // namespace

Model::ChunkOutput Model::forward_chunk(int, std::int64_t, const Batch&, const NamedTensors&,
                                        const StepOptions&) {
  no_pipeline("forward_chunk");
}

NamedTensors Model::backward_chunk(int, std::int64_t, const NamedTensors&, const StepOptions&) {
  no_pipeline("backward_chunk");
}

SampleSpec Model::stage_inputs(int, std::int64_t) const {
  no_pipeline("stage_inputs");
}

TaskHeadParameters Model::select_head(const TaskHead& head) {
  if (head.kind != TaskHead::Kind::pretraining) {
    throw ConfigError(
        "this [model] plugin has no classification or multiple-choice head; downstream tasks "
        "that fine-tune (RACE, MNLI, QQP) need one (the bert model has them)");
  }
  return {};
}

void StepResult::add(const StepResult& other) {
  for (const LossTerm& t : other.losses) {
    LossTerm* mine = nullptr;
    for (LossTerm& m : losses) {
      if (m.name == t.name) mine = &m;
    }
    if (mine) {
      mine->sum += t.sum;
      mine->count += t.count;
    } else {
      losses.push_back(t);
    }
  }
  for (const auto& [name, tensor] : other.outputs) {
    auto mine = std::find_if(outputs.begin(), outputs.end(),
                             [&](const auto& o) { return o.first == name; });
    if (mine == outputs.end()) {
      outputs.emplace_back(name, tensor);
      continue;
    }
    mine->second = stack_rows(mine->second, tensor, name);
  }
}

double StepResult::objective() const {
  double total = 0;
  for (const LossTerm& t : losses) {
    if (t.objective && t.count > 0) total += t.sum / t.count;
  }
  return total;
}

const LossTerm* StepResult::find(const std::string& name) const {
  for (const LossTerm& t : losses) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace megatron
