// Model parameters as data: each has its Megatron name, global shape, how it is initialised and
// whether weight decay applies; the training loop, optimizers and checkpoints only see these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "megatron/tensor/tensor.h"

namespace megatron {

// How a parameter starts (Megatron's rules; the Mamba mixer's are those of MambaMixer.__init__):
//  normal: N(0, init_std); zeros; ones; uniform: U[init_low, init_high);
//  log_uniform: log(U[init_low, init_high)) (Mamba's A_log);
//  inverse_softplus_log_uniform: softplus^-1(max(exp(U[log init_low, log init_high)),
//    init_floor)) (Mamba's dt_bias, so softplus(dt_bias) is log-uniform in [low, high]).
enum class ParamInit { normal, zeros, ones, uniform, log_uniform, inverse_softplus_log_uniform };

// One contiguous run of a tensor-parallel shard along its partition dimension: `length` rows
// (indices along partition_dim) that sit at `global_offset` in the global tensor and at
// `local_offset` in this rank's shard.
struct ShardRun {
  std::int64_t global_offset = 0;
  std::int64_t local_offset = 0;
  std::int64_t length = 0;
};

struct Parameter {
  std::string name;        // Megatron-core name, e.g. "decoder.layers.0.mlp.linear_fc1.weight"
  Shape global_shape;      // the unsplit shape, as stored in checkpoints
  int partition_dim = -1;  // tensor-parallel split dimension, -1 when replicated
  // How `value` sits in the global tensor (see Note [Tensor-parallel shards]).
  // Tensor-parallel size it was cut for (expert-parallel size for MoE expert tensors, which are
  // cut along dim 0 into whole experts); 1 = the whole tensor.
  int partition_count = 1;
  int partition_rank = 0;    // which slice of each block this rank holds
  int partition_blocks = 1;  // equal blocks along partition_dim split separately (2: SwiGLU fc1)
  // Unequal blocks instead (global extents, summing to the dimension), each split separately:
  // the Mamba mixer's in_proj [z, x, B, C, dt] and conv1d [x, B, C]. Empty: equal blocks.
  std::vector<std::int64_t> partition_block_sizes;
  // Replicated across tensor-parallel ranks but used on sequence shards (norm weights and biases
  // under sequence parallelism): each rank's grad is a partial sum, all-reduced over the
  // tensor-parallel group before the optimizer (Megatron's _allreduce_layernorm_grads).
  bool sequence_parallel = false;
  // The pipeline ranks holding a copy under the same name, ascending, when several do (a tied
  // word embedding on the first and last stage; T5's embedding also on its first decoder stage
  // and its relative position tables on every stage of their stack): the copies' gradients are
  // summed over them before the optimizer, so the copies stay equal; only the first holder
  // writes it to checkpoints and counts it in the gradient norm. Empty: this stage's own.
  std::vector<int> pipeline_holders;
  bool shared_across_pipeline() const { return pipeline_holders.size() > 1; }
  // Whether this pipeline rank is the one that speaks for the parameter (checkpoint, norm).
  bool first_pipeline_holder(int pp_rank) const {
    return !shared_across_pipeline() || pipeline_holders.front() == pp_rank;
  }
  // Mixture of Experts: a tensor holding `experts` experts along dim 0, of which each token uses
  // experts_per_token (its top-k); 0 for every other parameter. `plan` counts the active share.
  std::int64_t experts = 0;
  std::int64_t experts_per_token = 0;
  // Initialisation stream: the parameter's index in the whole model's declaration order (-1: its
  // index in this ParameterSet, the same thing when one rank holds the whole model).
  std::int64_t init_index = -1;
  ParamInit init = ParamInit::zeros;
  float init_std = 0;                                 // for ParamInit::normal
  float init_low = 0, init_high = 0, init_floor = 0;  // for the uniform kinds
  bool weight_decay = true;  // false for biases and norm weights (Megatron's no-decay group)
  // Read only as a GEMM's input (cast to the compute dtype there anyway: linear and expert
  // weights, an output layer) or as embedding rows (widened after the lookup: word embeddings):
  // generation with bf16/fp16 compute may hold it in that dtype alone (inference/held_weights.h).
  bool narrowable = false;
  Tensor value;  // this rank's shard; the fp32 master copy (or f64 in gradient tests)
  Tensor grad;   // same shape and dtype as value; accumulated over micro-batches
};

// Note [Tensor-parallel shards]
// Along partition_dim the global extent is cut into `partition_blocks` equal blocks (or the
// blocks of `partition_block_sizes`) and each block into `partition_count` equal slices; a rank
// holds slice `partition_rank` of every block, blocks in order. One block is Megatron's plain
// column/row split; SwiGLU's fc1 weight is [gate; up] globally, and rank r holds [gate_r; up_r]
// (two blocks), as Megatron-core's checkpoints expect. Megatron's fused QKV needs no blocks: its
// per-query-group layout puts whole groups in each slice.

// The shard's extent along partition_dim (global extent / partition_count).
std::int64_t shard_extent(const Parameter& p);
// The shard's runs in the global tensor, one per block (one run for a replicated parameter).
// Throws megatron::Error naming the parameter when the extent does not divide.
std::vector<ShardRun> shard_runs(const Parameter& p);
// The local shape: global_shape with partition_dim replaced by shard_extent.
Shape shard_shape(const Parameter& p);

// Parameters in declaration order (the order of checkpoints, clipping sums and optimizer state).
class ParameterSet {
 public:
  Parameter& add(Parameter p);
  std::size_t size() const { return params_.size(); }
  Parameter& operator[](std::size_t i) { return *params_[i]; }
  const Parameter& operator[](std::size_t i) const { return *params_[i]; }
  // nullptr when absent.
  Parameter* find(const std::string& name);
  const Parameter* find(const std::string& name) const;
  std::int64_t numel() const;  // elements of all local shards
  auto begin() { return params_.begin(); }
  auto end() { return params_.end(); }
  auto begin() const { return params_.begin(); }
  auto end() const { return params_.end(); }

 private:
  std::vector<std::unique_ptr<Parameter>> params_;  // stable addresses
};

}  // namespace megatron
