// The training loop's data-parallel machinery (Megatron's DistributedDataParallel and the
// distributed optimizer's buffers): every gradient a view into one contiguous buffer reduced bucket
// by bucket, optionally overlapped with backward, and with the distributed optimizer the parameter
// values in a matching buffer, each rank stepping only its shard, then all-gathered.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "megatron/backend/backend.h"
#include "megatron/nn/parameter.h"
#include "megatron/parallel/communicator.h"
#include "megatron/train/grad_buffer.h"

namespace megatron::train {

struct DdpSettings {
  bool overlap_grad_reduce = false;
  bool use_distributed_optimizer = false;
  bool overlap_param_gather = false;
  std::optional<std::int64_t> bucket_size;  // nullopt: Megatron's default (with overlap)
};

// Where a distributed-optimizer shard parameter sits: `param`'s flat elements [begin, end) (of its
// local tensor-parallel shard) are this rank's.
struct OwnedRange {
  Parameter* param = nullptr;
  std::size_t index = 0;   // the parameter's declaration index
  std::size_t domain = 0;  // which BufferDomain holds it
  std::size_t slot = 0;    // its position in that domain (into its BufferLayout's vectors)
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

// The parameters of one reduction group: the dense ones over the data-parallel ranks, the MoE
// experts' (Parameter::experts > 0) over the expert-data-parallel ranks, each in its own buffer
// (Megatron's buffers and expert_parallel_buffers).
struct BufferDomain {
  Communicator* comm = nullptr;
  BufferLayout layout;              // indices in it are positions in `params`
  std::vector<std::size_t> params;  // declaration indices of its parameters, in order
  Tensor grad_buffer, param_buffer;
  std::vector<std::int64_t> pending;                     // per bucket: parameters not yet reported
  std::vector<bool> ready;                               // per bucket: all parameters reported
  std::vector<CommHandle> grad_handles, gather_handles;  // per bucket
  std::size_t next_to_start = 0;  // buckets start in order: all ranks issue the same
};

class GradBuffers {
 public:
  // Moves every parameter's grad (and, with the distributed optimizer, its value) into the
  // buffers; values are copied in. All parameters must be f32 host or device tensors of one device.
  // `expert_data`: the expert-data-parallel group the experts' gradients are reduced over (null:
  // they join the dense buffer, right when it equals the data-parallel group). Both domains
  // average over the data-parallel size, as Megatron's expert_gradient_scaling_factor: an
  // expert's gradient already sums what every expert-parallel rank's tokens gave it.
  GradBuffers(ParameterSet& params, Communicator& data, Backend& backend, const DdpSettings& s,
              Communicator* expert_data = nullptr);
  ~GradBuffers();
  GradBuffers(const GradBuffers&) = delete;
  GradBuffers& operator=(const GradBuffers&) = delete;

  // The dense parameters' layout (every parameter's, without an expert domain).
  const BufferLayout& layout() const { return domains_.front().layout; }
  // The dense domain first, then the experts' when it has a buffer of its own.
  const std::vector<BufferDomain>& domains() const { return domains_; }
  bool distributed() const { return settings_.use_distributed_optimizer; }

  // Zeroes the whole gradient buffer (padding included) and forgets what was reported.
  void zero_grads();
  // StepOptions::grads_ready on the last micro-batch: buckets whose parameters are all reported
  // start reducing now (in bucket order, the same on every rank).
  void grads_ready(const std::vector<Parameter*>& done);
  // Starts what is not started yet and waits for everything: afterwards every grad is the
  // data-parallel mean (distributed optimizer: only in this rank's shard ranges).
  void finish_grad_sync();
  // Buckets whose reduction has started this step (tests: overlap starts them during backward).
  std::size_t buckets_started() const;

  // The parameters the optimizer steps: all of them, or this rank's shards (1-D views of the
  // owned ranges of value and grad, named like their parameter).
  ParameterSet& optimizer_params() { return distributed() ? shards_ : params_; }
  // For each shard parameter (same order as optimizer_params()), where it comes from.
  const std::vector<OwnedRange>& owned() const { return owned_; }
  // Gradients the optimizer sees (for the norm, unscaling and clipping).
  std::vector<Tensor*> optimizer_grads();

  // Distributed optimizer: all-gather the updated parameter buffer, bucket by bucket, in the order
  // forward uses them (the buffer's last bucket first). With overlap_param_gather it only starts;
  // the next forward waits for each bucket just before it reads it (StepOptions::params_needed ->
  // wait_param_gather(needed)), and wait_param_gather() finishes everything.
  void start_param_gather();
  void wait_param_gather();
  // Waits for the all-gathers of the buckets holding `needed` and lets the others progress.
  void wait_param_gather(const std::vector<Parameter*>& needed);
  // All-gathers started and not yet seen complete (tests: overlap leaves them in flight).
  std::size_t gathers_in_flight() const;

 private:
  struct Place {
    std::size_t domain = 0, slot = 0, bucket = 0;  // slot: position in the domain
  };
  void build_domain(BufferDomain& d, const std::vector<std::int64_t>& numels, DType dtype);
  void start_bucket(BufferDomain& d, std::size_t b);
  Place place_of(const Parameter* p, const char* caller) const;

  ParameterSet& params_;
  Backend& backend_;
  DdpSettings settings_;
  int data_parallel_size_ = 1;
  std::vector<BufferDomain> domains_;
  std::unordered_map<const Parameter*, Place> place_of_;
  ParameterSet shards_;
  std::vector<OwnedRange> owned_;
};

}  // namespace megatron::train
