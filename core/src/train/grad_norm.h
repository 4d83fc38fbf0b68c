// Megatron's finalize_model_grads after the data-parallel reduction: sequence-parallel gradients
// summed over the tensor-parallel group, and the global gradient norm for clipping. `params` are
// the optimizer's: the model's parameters, or the distributed optimizer's shards of them.
#pragma once

#include "megatron/backend/backend.h"
#include "megatron/nn/parameter.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron::train {

// All-reduces (sum) over Group::tensor the grads of parameters with `sequence_parallel` set: each
// tensor-parallel rank holds the partial sum over its sequence shard.
void allreduce_sequence_parallel_grads(ParameterSet& params, const ParallelState& parallel);

// Sums the grads of every parameter held by several pipeline stages (`shared_across_pipeline()`,
// over its `pipeline_holders`) so all copies get the same update: the first holder adds the
// others' copies in stage order and sends the sum back, point to point over Group::pipeline
// (any set of stages, with no communicator per set). Called by every pipeline rank.
void allreduce_shared_pipeline_grads(ParameterSet& params, const ParallelState& parallel);

// The L2 norm of every gradient element of the model, each counted once: parameters replicated
// over tensor-parallel ranks count on tp rank 0 only; squares are summed over the model-parallel
// group (tensor x pipeline) and, when `params` are distributed-optimizer shards, over the
// data-parallel group too. Under expert parallelism the experts' squares are summed over the
// expert, pipeline (and, sharded, expert-data) groups instead. Collective over those groups;
// NaN/Inf propagate.
double global_grad_norm(Backend& backend, const ParameterSet& params, const ParallelState& parallel,
                        bool sharded_over_data);

}  // namespace megatron::train
