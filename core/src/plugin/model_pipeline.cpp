// Model's optional pipeline-parallel interface (what a model that does not implement it answers)
// and the arithmetic of named losses.
#include "megatron/error.h"
#include "megatron/model.h"

namespace megatron {

namespace {
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
