// HDF5 checkpoints: one file per saved iteration holding every tensor under its global name and
// shape, plus the iteration, data position, RNG and the resolved config as attributes. Written to
// a temporary name then renamed, and the latest-iteration marker last, so a crash at any moment
// leaves the previous checkpoint intact.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "megatron/tensor/tensor.h"

namespace megatron::checkpoint {

// Format version written to the root attribute `format_version`; readers refuse newer majors.
inline constexpr int kFormatVersion = 1;

struct CheckpointState {
  std::int64_t iteration = 0;
  std::int64_t consumed_train_samples = 0;
  std::int64_t consumed_valid_samples = 0;
  std::int64_t skipped_iterations = 0;  // total so far (loss-scaler overflows)
  std::string config_toml;              // the resolved config (--print-config text)
  // Integer and floating scalars such as rng seeds/offsets, loss scale, scheduler steps.
  std::map<std::string, std::int64_t> int_attributes;
  std::map<std::string, double> float_attributes;
  // Host tensors by full path: "model/<param name>", "optimizer/<state>/<param name>", ...
  // Each is stored as an HDF5 dataset of its shape and dtype (f32, f64, i32, i64; bf16/f16 as
  // f32 with attribute `dtype` naming the original).
  std::map<std::string, Tensor> tensors;
};

// "<dir>/iter_0000010.h5": Megatron's iteration naming with an HDF5 file per iteration.
std::filesystem::path checkpoint_file(const std::filesystem::path& dir, std::int64_t iteration);
// "<dir>/latest_checkpointed_iteration.txt".
std::filesystem::path latest_marker(const std::filesystem::path& dir);

// Writes the checkpoint of state.iteration into `dir` (created if missing) and then updates the
// latest marker; returns the file written. Throws megatron::Error naming the path on failure,
// leaving any earlier checkpoint untouched.
std::filesystem::path save_checkpoint(const std::filesystem::path& dir,
                                      const CheckpointState& state);

// The iteration in the latest marker; nullopt when `dir` has no marker. A malformed marker or a
// marker naming a missing file throws megatron::Error naming the file.
std::optional<std::int64_t> latest_iteration(const std::filesystem::path& dir);

// Reads a checkpoint file (or, for a directory, its latest). Tensors whose path starts with one
// of `skip_prefixes` (e.g. "optimizer/") are not read. Throws megatron::Error naming the file and
// what is wrong for a missing file, a file that is not HDF5 or not a megatron-app checkpoint.
CheckpointState load_checkpoint(const std::filesystem::path& path,
                                const std::vector<std::string>& skip_prefixes = {});

}  // namespace megatron::checkpoint
