// Tensor-parallel-aware gradient finalisation: sequence-parallel grad all-reduce and the global
// gradient norm with every number counted exactly once.
#include "grad_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace megatron::train {

void allreduce_sequence_parallel_grads(ParameterSet& params, const ParallelState& parallel) {
  if (parallel.tp_size() <= 1) return;
  Communicator& tensor = parallel.device_comm(Group::tensor);
  for (auto& p : params) {
    if (!p->sequence_parallel) continue;
    tensor.all_reduce(p->grad.raw_data(), static_cast<std::size_t>(p->grad.numel()),
                      p->grad.dtype(), ReduceOp::sum);
  }
}

void allreduce_shared_pipeline_grads(ParameterSet& params, const ParallelState& parallel) {
  if (parallel.pp_size() <= 1) return;
  const int me = parallel.pp_rank();
  // The same order on every stage whatever each declared first: by name.
  std::vector<Parameter*> shared;
  for (auto& p : params) {
    if (p->shared_across_pipeline()) shared.push_back(p.get());
  }
  if (shared.empty()) return;
  std::sort(shared.begin(), shared.end(),
            [](const Parameter* a, const Parameter* b) { return a->name < b->name; });
  Communicator& pipe = parallel.device_comm(Group::pipeline);
  constexpr int kToFirst = 30000,
                kFromFirst = 30001;  // clear of the schedule's tags (< MPI_TAG_UB)
  auto count = [](const Parameter* p) { return static_cast<std::size_t>(p->grad.numel()); };
  // Every copy but the first holder's goes to it; sends are asynchronous, so a rank that is first
  // holder of one parameter and not of another never waits on itself.
  std::vector<CommHandle> sends;
  for (Parameter* p : shared) {
    if (p->pipeline_holders.front() != me) {
      sends.push_back(pipe.send_async(p->grad.raw_data(), count(p), p->grad.dtype(),
                                      p->pipeline_holders.front(), kToFirst));
    }
  }
  for (Parameter* p : shared) {
    if (p->pipeline_holders.front() != me) continue;
    Backend& be = backend_for(p->grad.device());
    Tensor received = be.empty(p->grad.shape(), p->grad.dtype());
    for (std::size_t i = 1; i < p->pipeline_holders.size(); ++i) {
      pipe.recv(received.raw_data(), count(p), p->grad.dtype(), p->pipeline_holders[i], kToFirst);
      be.axpy(1.0, received, p->grad);
    }
  }
  for (CommHandle& h : sends)
    h.wait();
  sends.clear();
  for (Parameter* p : shared) {
    if (p->pipeline_holders.front() != me) continue;
    for (std::size_t i = 1; i < p->pipeline_holders.size(); ++i) {
      sends.push_back(pipe.send_async(p->grad.raw_data(), count(p), p->grad.dtype(),
                                      p->pipeline_holders[i], kFromFirst));
    }
  }
  for (Parameter* p : shared) {
    if (p->pipeline_holders.front() != me) {
      pipe.recv(p->grad.raw_data(), count(p), p->grad.dtype(), p->pipeline_holders.front(),
                kFromFirst);
    }
  }
  for (CommHandle& h : sends)
    h.wait();
}

double global_grad_norm(Backend& backend, const ParameterSet& params, const ParallelState& parallel,
                        bool sharded_over_data) {
  const bool tp_rank0 = parallel.tp_rank() <= 0;
  // Under expert parallelism each expert-parallel rank holds other experts: their squares are
  // summed over the expert and pipeline groups (and the expert-data group when sharded), as
  // Megatron's expert norm, and added to the dense parameters'.
  const bool expert_split = parallel.ep_size() > 1;
  std::vector<const Tensor*> counted, experts;
  for (const auto& p : params) {
    // Another stage's copy of a shared parameter repeats its first holder's (Megatron's
    // param_is_not_shared).
    if (!p->first_pipeline_holder(parallel.pp_rank())) continue;
    if (expert_split && p->experts > 0) {
      experts.push_back(&p->grad);
      continue;
    }
    // A tensor-parallel shard is this rank's own numbers; a replicated parameter is the same on
    // every tensor-parallel rank, so only rank 0 counts it.
    if (p->partition_count > 1 || tp_rank0) counted.push_back(&p->grad);
  }
  const double local = backend.l2_norm(counted);
  const bool across_model = parallel.group_size(Group::model) > 1;
  // The distributed optimizer shards over data x context (the group gradients are reduced over).
  const bool across_data = sharded_over_data && parallel.group_size(Group::data_context) > 1;
  if (!across_model && !across_data && !expert_split) {
    return local;  // bit-identical to the one-rank norm
  }
  double squares = local * local;
  if (across_model) squares = parallel.comm(Group::model).all_reduce_value(squares, ReduceOp::sum);
  if (across_data) {
    squares = parallel.comm(Group::data_context).all_reduce_value(squares, ReduceOp::sum);
  }
  if (expert_split) {
    const double expert_norm = backend.l2_norm(experts);
    double expert_squares = expert_norm * expert_norm;
    expert_squares = parallel.comm(Group::expert).all_reduce_value(expert_squares, ReduceOp::sum);
    if (parallel.pp_size() > 1) {
      expert_squares =
          parallel.comm(Group::pipeline).all_reduce_value(expert_squares, ReduceOp::sum);
    }
    if (sharded_over_data && parallel.edp_size() > 1) {
      expert_squares =
          parallel.comm(Group::expert_data).all_reduce_value(expert_squares, ReduceOp::sum);
    }
    squares += expert_squares;
  }
  return std::sqrt(squares);
}

}  // namespace megatron::train
