// Contiguous gradient/parameter buffers, bucketed data-parallel reduction and the distributed
// optimizer's shards (Megatron's DistributedDataParallel + DistributedOptimizer, simplified).
#include "grad_buffer.h"

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
                         const DdpSettings& s)
    : params_(params), data_(data), backend_(backend), settings_(s) {
  std::vector<std::int64_t> numels;
  DType dtype = DType::f32;
  Device device = Device::cpu();
  for (std::size_t k = 0; k < params.size(); ++k) {
    const Parameter& p = params[k];
    if (k == 0) dtype = p.value.dtype(), device = p.value.device();
    if (p.value.dtype() != dtype || p.grad.dtype() != dtype || p.value.device() != device) {
      throw Error("data-parallel buffers: parameter '" + p.name + "' is " + p.value.describe() +
                  "; every parameter must have the dtype and device of '" + params[0].name + "'");
    }
    numels.push_back(p.value.numel());
    index_of_.emplace(&p, k);
  }
  BufferOptions options;
  options.data_parallel_size = data.size();
  options.distributed_optimizer = s.use_distributed_optimizer;
  if (s.use_distributed_optimizer) {
    // The tied embedding copies of the first and last stage must be sharded alike (see
    // BufferOptions::separate_bucket).
    for (const auto& p : params)
      options.separate_bucket.push_back(p->shared_across_pipeline());
  }
  // Megatron: one bucket unless gradients are reduced while backward runs.
  if (s.overlap_grad_reduce)
    options.bucket_size = s.bucket_size.value_or(default_bucket_size(data.size()));
  layout_ = layout_buffer(numels, options);

  const std::int64_t total = std::max<std::int64_t>(layout_.numel, 1);
  grad_buffer_ = backend.empty({total}, dtype);
  backend.fill(grad_buffer_, 0.0);
  if (distributed()) {
    param_buffer_ = backend.empty({total}, dtype);
    backend.fill(param_buffer_, 0.0);  // padding stays zero
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    Parameter& p = params[k];
    const Shape shape = p.value.shape();
    p.grad = view_of(grad_buffer_, layout_.param_offset[k], numels[k], shape);
    if (distributed()) {
      Tensor home = view_of(param_buffer_, layout_.param_offset[k], numels[k], shape);
      backend.copy(p.value, home);
      p.value = home;
    }
  }
  const std::size_t n = layout_.buckets.size();
  pending_.assign(n, 0);
  ready_.assign(n, false);
  grad_handles_.resize(n);
  gather_handles_.resize(n);
  zero_grads();

  if (!distributed()) return;
  // This rank's shard of every bucket, cut at parameter boundaries into shard parameters, in
  // declaration order so optimizer state and checkpoints see a stable order.
  const int rank = data.rank();
  for (std::size_t k = 0; k < params.size(); ++k) {
    Parameter& p = params[k];
    const ShardRange range = layout_.shard(layout_.param_bucket[k], rank);
    const std::int64_t lo = std::max(range.begin, layout_.param_offset[k]);
    const std::int64_t hi = std::min(range.end, layout_.param_offset[k] + numels[k]);
    if (hi <= lo) continue;
    Parameter shard;
    shard.name = p.name;
    shard.global_shape = {hi - lo};
    shard.partition_count = p.partition_count;  // for the norm: is it a tensor-parallel duplicate
    shard.partition_rank = p.partition_rank;
    shard.sequence_parallel = p.sequence_parallel;
    shard.pipeline_holders = p.pipeline_holders;
    shard.init = p.init;
    shard.init_std = p.init_std;
    shard.weight_decay = p.weight_decay;
    shard.value = view_of(param_buffer_, lo, hi - lo, {hi - lo});
    shard.grad = view_of(grad_buffer_, lo, hi - lo, {hi - lo});
    shards_.add(std::move(shard));
    owned_.push_back({&p, k, lo - layout_.param_offset[k], hi - layout_.param_offset[k]});
  }
}

GradBuffers::~GradBuffers() = default;

void GradBuffers::zero_grads() {
  for (CommHandle& h : grad_handles_)
    h.wait();
  backend_.fill(grad_buffer_, 0.0);
  for (std::size_t b = 0; b < layout_.buckets.size(); ++b) {
    pending_[b] = static_cast<std::int64_t>(layout_.buckets[b].params.size());
    ready_[b] = pending_[b] == 0;
  }
  next_to_start_ = 0;
}

void GradBuffers::start_bucket(std::size_t b) {
  const int dp = data_.size();
  if (dp == 1) return;
  const BucketLayout& bucket = layout_.buckets[b];
  if (bucket.numel == 0) return;
  // Megatron pre-scales by 1/dp so the sum is the mean (exact for powers of two).
  Tensor view = grad_buffer_.slice(0, bucket.offset, bucket.numel);
  backend_.scale(view, 1.0 / static_cast<double>(dp));
  char* start = element_ptr(grad_buffer_, bucket.offset);
  const DType dtype = grad_buffer_.dtype();
  if (distributed()) {
    const std::int64_t piece = bucket.numel / dp;
    // In place: rank r's reduced block lands where its shard lives.
    grad_handles_[b] = data_.reduce_scatter_async(
        start, element_ptr(grad_buffer_, bucket.offset + data_.rank() * piece),
        static_cast<std::size_t>(piece), dtype, ReduceOp::sum);
  } else {
    grad_handles_[b] =
        data_.all_reduce_async(start, static_cast<std::size_t>(bucket.numel), dtype, ReduceOp::sum);
  }
}

std::size_t GradBuffers::bucket_of(const Parameter* p, const char* caller) const {
  const auto it = index_of_.find(p);
  if (it == index_of_.end()) {
    throw Error(std::string(caller) + " named parameter '" + p->name +
                "', which the data-parallel buffers do not hold");
  }
  return layout_.param_bucket[it->second];
}

void GradBuffers::grads_ready(const std::vector<Parameter*>& done) {
  for (const Parameter* p : done) {
    const std::size_t b = bucket_of(p, "grads_ready");
    if (--pending_[b] < 0) {
      throw Error("grads_ready reported parameter '" + p->name + "' twice in one step");
    }
    if (pending_[b] == 0) ready_[b] = true;
  }
  // Buckets start strictly in buffer order, so every rank issues the same collectives in the
  // same order whatever order the model reports in.
  while (next_to_start_ < layout_.buckets.size() && ready_[next_to_start_])
    start_bucket(next_to_start_++);
  // MPI progresses inside MPI calls: poke the in-flight reductions.
  for (std::size_t b = 0; b < next_to_start_; ++b)
    grad_handles_[b].test();
}

void GradBuffers::finish_grad_sync() {
  while (next_to_start_ < layout_.buckets.size())
    start_bucket(next_to_start_++);
  for (CommHandle& h : grad_handles_)
    h.wait();
}

std::vector<Tensor*> GradBuffers::optimizer_grads() {
  std::vector<Tensor*> grads;
  for (auto& p : optimizer_params())
    grads.push_back(&p->grad);
  return grads;
}

void GradBuffers::start_param_gather() {
  const int dp = data_.size();
  if (!distributed() || dp == 1) return;
  // Megatron's order: forward needs the first layers first, which sit in the last buckets. Every
  // rank issues the same gathers in the same order.
  for (std::size_t b = layout_.buckets.size(); b-- > 0;) {
    const BucketLayout& bucket = layout_.buckets[b];
    if (bucket.numel == 0) continue;
    const std::int64_t piece = bucket.numel / dp;
    gather_handles_[b] =
        data_.all_gather_async(element_ptr(param_buffer_, bucket.offset + data_.rank() * piece),
                               element_ptr(param_buffer_, bucket.offset),
                               static_cast<std::size_t>(piece), param_buffer_.dtype());
  }
  if (!settings_.overlap_param_gather) wait_param_gather();
}

void GradBuffers::wait_param_gather() {
  for (CommHandle& h : gather_handles_)
    h.wait();
}

void GradBuffers::wait_param_gather(const std::vector<Parameter*>& needed) {
  for (const Parameter* p : needed)
    gather_handles_[bucket_of(p, "params_needed")].wait();
  // MPI progresses inside MPI calls: poke the gathers still in flight.
  for (CommHandle& h : gather_handles_)
    h.test();
}

std::size_t GradBuffers::gathers_in_flight() const {
  std::size_t n = 0;
  for (const CommHandle& h : gather_handles_)
    n += h.completed() ? 0 : 1;
  return n;
}

}  // namespace megatron::train
