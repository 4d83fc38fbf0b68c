// ParameterSet: ordered, named parameters with stable addresses.
#include "megatron/nn/parameter.h"

#include <algorithm>
#include <string>

#include "megatron/error.h"

namespace megatron {

namespace {

// The global extents of the blocks along partition_dim.
std::vector<std::int64_t> block_extents(const Parameter& p, std::int64_t global) {
  if (!p.partition_block_sizes.empty()) return p.partition_block_sizes;
  return std::vector<std::int64_t>(static_cast<std::size_t>(std::max(1, p.partition_blocks)),
                                   global / std::max(1, p.partition_blocks));
}

std::int64_t partition_extent(const Parameter& p) {
  if (p.partition_dim < 0 || p.partition_count == 1) return -1;
  if (p.partition_dim >= static_cast<int>(p.global_shape.size())) {
    throw Error("parameter '" + p.name + "': partition_dim " + std::to_string(p.partition_dim) +
                " is out of range for a tensor of rank " + std::to_string(p.global_shape.size()));
  }
  const std::int64_t global = p.global_shape[static_cast<std::size_t>(p.partition_dim)];
  bool ok = p.partition_blocks >= 1 && p.partition_count >= 1 && p.partition_rank >= 0 &&
            p.partition_rank < p.partition_count;
  std::int64_t total = 0;
  std::string blocks;
  for (std::int64_t block : block_extents(p, global)) {
    ok = ok && block % p.partition_count == 0;
    total += block;
    blocks += (blocks.empty() ? "" : ", ") + std::to_string(block);
  }
  if (!ok || total != global) {
    throw Error("parameter '" + p.name + "': dimension " + std::to_string(p.partition_dim) +
                " of size " + std::to_string(global) + " cannot be cut into blocks [" + blocks +
                "] x " + std::to_string(p.partition_count) + " tensor-parallel slices (rank " +
                std::to_string(p.partition_rank) + ")");
  }
  return global;
}

}  // namespace

std::int64_t shard_extent(const Parameter& p) {
  const std::int64_t global = partition_extent(p);
  if (global < 0) return p.global_shape.empty() ? 1 : p.global_shape[std::max(0, p.partition_dim)];
  return global / p.partition_count;
}

std::vector<ShardRun> shard_runs(const Parameter& p) {
  const std::int64_t global = partition_extent(p);
  if (global < 0) {
    const std::int64_t all =
        p.global_shape.empty() ? 1 : p.global_shape[std::max(0, p.partition_dim)];
    return {{0, 0, all}};
  }
  std::vector<ShardRun> runs;
  std::int64_t global_offset = 0, local_offset = 0;
  for (std::int64_t block : block_extents(p, global)) {
    const std::int64_t slice = block / p.partition_count;
    runs.push_back({global_offset + p.partition_rank * slice, local_offset, slice});
    global_offset += block;
    local_offset += slice;
  }
  return runs;
}

Shape shard_shape(const Parameter& p) {
  Shape s = p.global_shape;
  if (partition_extent(p) >= 0) s[static_cast<std::size_t>(p.partition_dim)] = shard_extent(p);
  return s;
}

Parameter& ParameterSet::add(Parameter p) {
  if (find(p.name)) throw Error("parameter '" + p.name + "' declared twice");
  params_.push_back(std::make_unique<Parameter>(std::move(p)));
  return *params_.back();
}

Parameter* ParameterSet::find(const std::string& name) {
  for (auto& p : params_)
    if (p->name == name) return p.get();
  return nullptr;
}

const Parameter* ParameterSet::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p->name == name) return p.get();
  return nullptr;
}

std::int64_t ParameterSet::numel() const {
  std::int64_t n = 0;
  for (const auto& p : params_)
    n += shape_numel(p->value.defined() ? p->value.shape() : p->global_shape);
  return n;
}

}  // namespace megatron
