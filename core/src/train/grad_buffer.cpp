// Contiguous gradient/parameter buffers, bucketed data-parallel reduction and the distributed
// optimizer's shards (Megatron's DistributedDataParallel + DistributedOptimizer, simplified).
#include "grad_buffer.h"

#include <algorithm>
#include <string>

#include "megatron/error.h"

namespace megatron::train {

namespace {

// A 1-D view of `count` elements of `buffer` from `offset`, reshaped to `shape`.
Tensor view_of(const Tensor& buffer, std::int64_t offset, std::int64_t count, const Shape& shape) {
  return buffer.slice(0, offset, count).view(shape);
}

char* element_ptr(const Tensor& buffer, std::int64_t index) {
  return static_cast<char*>(buffer.raw_data()) +
         index * static_cast<std::int64_t>(buffer.element_size());
}

}  // namespace

GradBuffers::GradBuffers(ParameterSet& params, Communicator& data, Backend& backend,
                         const DdpSettings& s, Communicator* expert_data)
    : params_(params), backend_(backend), settings_(s), data_parallel_size_(data.size()) {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  domains_.resize(expert_data ? 2 : 1);
  domains_[0].comm = &data;
  if (expert_data) domains_[1].comm = expert_data;
  std::vector<std::vector<std::int64_t>> numels(domains_.size());
  for (std::size_t k = 0; k < params.size(); ++k) {
    const Parameter& p = params[k];
    if (k == 0) dtype = p.value.dtype(), device = p.value.device();
    if (p.value.dtype() != dtype || p.grad.dtype() != dtype || p.value.device() != device) {
      throw Error("data-parallel buffers: parameter '" + p.name + "' is " + p.value.describe() +
                  "; every parameter must have the dtype and device of '" + params[0].name + "'");
    }
    const std::size_t d = expert_data && p.experts > 0 ? 1 : 0;
    place_of_.emplace(&p, Place{d, domains_[d].params.size(), 0});
    domains_[d].params.push_back(k);
    numels[d].push_back(p.value.numel());
  }
  // An expert domain without experts (a pipeline stage of dense layers) stays empty.
  if (domains_.size() == 2 && domains_[1].params.empty()) domains_.pop_back();
  for (std::size_t d = 0; d < domains_.size(); ++d)
    build_domain(domains_[d], numels[d], dtype);
  for (std::size_t d = 0; d < domains_.size(); ++d) {
    for (std::size_t slot = 0; slot < domains_[d].params.size(); ++slot)
      place_of_[&params[domains_[d].params[slot]]].bucket = domains_[d].layout.param_bucket[slot];
  }
  zero_grads();
  if (!distributed()) return;
  // This rank's shard of every bucket, cut at parameter boundaries into shard parameters, in
  // declaration order so optimizer state and checkpoints see a stable order.
  for (std::size_t k = 0; k < params.size(); ++k) {
    Parameter& p = params[k];
    const auto [d, slot, bucket] = place_of_.at(&p);
    BufferDomain& domain = domains_[d];
    const BufferLayout& layout = domain.layout;
    const ShardRange range = layout.shard(bucket, domain.comm->rank());
    const std::int64_t offset = layout.param_offset[slot], numel = layout.param_numel[slot];
    const std::int64_t lo = std::max(range.begin, offset);
    const std::int64_t hi = std::min(range.end, offset + numel);
    if (hi <= lo) continue;
    Parameter shard;
    shard.name = p.name;
    shard.global_shape = {hi - lo};
    shard.partition_count = p.partition_count;  // for the norm: is it a tensor-parallel duplicate
    shard.partition_rank = p.partition_rank;
    shard.sequence_parallel = p.sequence_parallel;
    shard.pipeline_holders = p.pipeline_holders;
    shard.experts = p.experts;
    shard.experts_per_token = p.experts_per_token;
    shard.init = p.init;
    shard.init_std = p.init_std;
    shard.weight_decay = p.weight_decay;
    shard.value = view_of(domain.param_buffer, lo, hi - lo, {hi - lo});
    shard.grad = view_of(domain.grad_buffer, lo, hi - lo, {hi - lo});
    shards_.add(std::move(shard));
    owned_.push_back({&p, k, d, slot, lo - offset, hi - offset});
  }
}

void GradBuffers::build_domain(BufferDomain& d, const std::vector<std::int64_t>& numels,
                               DType dtype) {
  BufferOptions options;
  options.data_parallel_size = d.comm->size();
  options.distributed_optimizer = settings_.use_distributed_optimizer;
  if (settings_.use_distributed_optimizer) {
    // The tied embedding copies of the first and last stage must be sharded alike (see
    // BufferOptions::separate_bucket).
    for (const std::size_t k : d.params)
      options.separate_bucket.push_back(params_[k].shared_across_pipeline());
  }
  // Megatron: one bucket unless gradients are reduced while backward runs.
  if (settings_.overlap_grad_reduce) {
    options.bucket_size = settings_.bucket_size.value_or(default_bucket_size(data_parallel_size_));
  }
  d.layout = layout_buffer(numels, options);

  const std::int64_t total = std::max<std::int64_t>(d.layout.numel, 1);
  d.grad_buffer = backend_.empty({total}, dtype);
  backend_.fill(d.grad_buffer, 0.0);
  if (distributed()) {
    d.param_buffer = backend_.empty({total}, dtype);
    backend_.fill(d.param_buffer, 0.0);  // padding stays zero
  }
  for (std::size_t slot = 0; slot < d.params.size(); ++slot) {
    Parameter& p = params_[d.params[slot]];
    const Shape shape = p.value.shape();
    p.grad = view_of(d.grad_buffer, d.layout.param_offset[slot], numels[slot], shape);
    if (distributed()) {
      Tensor home = view_of(d.param_buffer, d.layout.param_offset[slot], numels[slot], shape);
      backend_.copy(p.value, home);
      p.value = home;
    }
  }
  const std::size_t n = d.layout.buckets.size();
  d.pending.assign(n, 0);
  d.ready.assign(n, false);
  d.grad_handles.resize(n);
  d.gather_handles.resize(n);
}

GradBuffers::~GradBuffers() = default;

void GradBuffers::zero_grads() {
  for (BufferDomain& d : domains_) {
    for (CommHandle& h : d.grad_handles)
      h.wait();
    backend_.fill(d.grad_buffer, 0.0);
    for (std::size_t b = 0; b < d.layout.buckets.size(); ++b) {
      d.pending[b] = static_cast<std::int64_t>(d.layout.buckets[b].params.size());
      d.ready[b] = d.pending[b] == 0;
    }
    d.next_to_start = 0;
  }
}

void GradBuffers::start_bucket(BufferDomain& d, std::size_t b) {
  const int group = d.comm->size();
  const BucketLayout& bucket = d.layout.buckets[b];
  if (bucket.numel == 0) return;
  // Megatron pre-scales by 1/dp so the sum is the mean (exact for powers of two).
  if (data_parallel_size_ > 1) {
    Tensor view = d.grad_buffer.slice(0, bucket.offset, bucket.numel);
    backend_.scale(view, 1.0 / static_cast<double>(data_parallel_size_));
  }
  if (group == 1) return;
  char* start = element_ptr(d.grad_buffer, bucket.offset);
  const DType dtype = d.grad_buffer.dtype();
  if (distributed()) {
    const std::int64_t piece = bucket.numel / group;
    // In place: rank r's reduced block lands where its shard lives.
    d.grad_handles[b] = d.comm->reduce_scatter_async(
        start, element_ptr(d.grad_buffer, bucket.offset + d.comm->rank() * piece),
        static_cast<std::size_t>(piece), dtype, ReduceOp::sum);
  } else {
    d.grad_handles[b] = d.comm->all_reduce_async(start, static_cast<std::size_t>(bucket.numel),
                                                 dtype, ReduceOp::sum);
  }
}

GradBuffers::Place GradBuffers::place_of(const Parameter* p, const char* caller) const {
  const auto it = place_of_.find(p);
  if (it == place_of_.end()) {
    throw Error(std::string(caller) + " named parameter '" + p->name +
                "', which the data-parallel buffers do not hold");
  }
  return it->second;
}

void GradBuffers::grads_ready(const std::vector<Parameter*>& done) {
  for (const Parameter* p : done) {
    const Place at = place_of(p, "grads_ready");
    BufferDomain& d = domains_[at.domain];
    if (--d.pending[at.bucket] < 0) {
      throw Error("grads_ready reported parameter '" + p->name + "' twice in one step");
    }
    if (d.pending[at.bucket] == 0) d.ready[at.bucket] = true;
  }
  for (BufferDomain& d : domains_) {
    // Buckets start strictly in buffer order, so every rank issues the same collectives in the
    // same order whatever order the model reports in.
    while (d.next_to_start < d.layout.buckets.size() && d.ready[d.next_to_start])
      start_bucket(d, d.next_to_start++);
    // MPI progresses inside MPI calls: poke the in-flight reductions.
    for (std::size_t b = 0; b < d.next_to_start; ++b)
      d.grad_handles[b].test();
  }
}

void GradBuffers::finish_grad_sync() {
  for (BufferDomain& d : domains_) {
    while (d.next_to_start < d.layout.buckets.size())
      start_bucket(d, d.next_to_start++);
  }
  for (BufferDomain& d : domains_) {
    for (CommHandle& h : d.grad_handles)
      h.wait();
  }
}

std::size_t GradBuffers::buckets_started() const {
  std::size_t n = 0;
  for (const BufferDomain& d : domains_)
    n += d.next_to_start;
  return n;
}

std::vector<Tensor*> GradBuffers::optimizer_grads() {
  std::vector<Tensor*> grads;
  for (auto& p : optimizer_params())
    grads.push_back(&p->grad);
  return grads;
}

void GradBuffers::start_param_gather() {
  if (!distributed()) return;
  for (BufferDomain& d : domains_) {
    const int group = d.comm->size();
    if (group == 1) continue;
    // Megatron's order: forward needs the first layers first, which sit in the last buckets.
    // Every rank issues the same gathers in the same order.
    for (std::size_t b = d.layout.buckets.size(); b-- > 0;) {
      const BucketLayout& bucket = d.layout.buckets[b];
      if (bucket.numel == 0) continue;
      const std::int64_t piece = bucket.numel / group;
      d.gather_handles[b] = d.comm->all_gather_async(
          element_ptr(d.param_buffer, bucket.offset + d.comm->rank() * piece),
          element_ptr(d.param_buffer, bucket.offset), static_cast<std::size_t>(piece),
          d.param_buffer.dtype());
    }
  }
  if (!settings_.overlap_param_gather) wait_param_gather();
}

void GradBuffers::wait_param_gather() {
  for (BufferDomain& d : domains_) {
    for (CommHandle& h : d.gather_handles)
      h.wait();
  }
}

void GradBuffers::wait_param_gather(const std::vector<Parameter*>& needed) {
  for (const Parameter* p : needed) {
    const Place at = place_of(p, "params_needed");
    domains_[at.domain].gather_handles[at.bucket].wait();
  }
  // MPI progresses inside MPI calls: poke the gathers still in flight.
  for (BufferDomain& d : domains_) {
    for (CommHandle& h : d.gather_handles)
      h.test();
  }
}

std::size_t GradBuffers::gathers_in_flight() const {
  std::size_t n = 0;
  for (const BufferDomain& d : domains_) {
    for (const CommHandle& h : d.gather_handles)
      n += h.completed() ? 0 : 1;
  }
  return n;
}

}  // namespace megatron::train
