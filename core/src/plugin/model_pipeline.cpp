// Model's optional pipeline-parallel interface: what a model that does not implement it answers.
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

Model::ChunkOutput Model::forward_chunk(int, std::int64_t, const Batch&, const Tensor&,
                                        const StepOptions&) {
  no_pipeline("forward_chunk");
}

Tensor Model::backward_chunk(int, std::int64_t, const Tensor&, const StepOptions&) {
  no_pipeline("backward_chunk");
}

Shape Model::activation_shape(std::int64_t) const {
  no_pipeline("activation_shape");
}

}  // namespace megatron
