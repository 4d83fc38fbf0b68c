// HDF5 checkpoints: one file per saved iteration holding every tensor under its global name and
// shape, plus the iteration, data position, RNG and the resolved config as attributes. Written to
// a temporary name then renamed, and the latest-iteration marker last, so a crash at any moment
// leaves the previous checkpoint intact.
//
// Note [Checkpoint file layout] (format_version 1)
//   Root attributes: format_version, iteration, consumed_train_samples, consumed_valid_samples,
//   skipped_iterations (64-bit integers) and config (a UTF-8 variable-length string).
//   CheckpointState::int_attributes[k] is the root attribute "int.<k>" (64-bit integer) and
//   float_attributes[k] is "float.<k>" (IEEE double), so both round-trip bit for bit.
//   A tensor "a/b/c" is dataset c in group /a/b (names may contain dots, e.g.
//   /model/decoder.layers.0.mlp.linear_fc1.weight), of the tensor's shape (a scalar for rank 0),
//   contiguous layout, no filters. f32, f64, i32, i64 and u8 are stored natively (little endian);
//   bf16 and f16 are stored as f32 (exact) with a string attribute `dtype` = "bfloat16" or
//   "float16", and converted back on load (values are exact; an f16 NaN comes back as the
//   canonical quiet NaN, a bf16 signalling NaN as quiet).
//   Files are iter_XXXXXXX.h5; saving writes iter_XXXXXXX.h5.partial, fsyncs, renames, then
//   replaces latest_checkpointed_iteration.txt (the bare number, as Megatron writes it) the same
//   way. Leftover *.h5.partial files from an interrupted save are removed by the next save.
//
// Thread safety: every function may be called from any thread; HDF5 use is serialised by one
// process-wide lock (the HDF5 build is not thread-safe), and HDF5's automatic error printing is
// turned off. One process writes a checkpoint (parallel HDF5 comes later).
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
  int format_version = kFormatVersion;  // set by load_checkpoint; saves always write kFormatVersion
  std::int64_t iteration = 0;
  std::int64_t consumed_train_samples = 0;
  std::int64_t consumed_valid_samples = 0;
  std::int64_t skipped_iterations = 0;  // total so far (loss-scaler overflows)
  std::string config_toml;              // the resolved config (--print-config text)
  // Integer and floating scalars such as rng seeds/offsets, loss scale, scheduler steps.
  std::map<std::string, std::int64_t> int_attributes;
  std::map<std::string, double> float_attributes;
  // Host tensors by full path: "model/<param name>", "optimizer/<state>/<param name>", ...
  // Each is stored as an HDF5 dataset of its shape and dtype (f32, f64, i32, i64, u8; bf16/f16
  // as f32 with attribute `dtype` naming the original). Tensors may be non-contiguous views;
  // they must be defined host tensors. Path components must be non-empty and not "." or "..".
  std::map<std::string, Tensor> tensors;
};

// "<dir>/iter_0000010.h5": Megatron's iteration naming with an HDF5 file per iteration.
std::filesystem::path checkpoint_file(const std::filesystem::path& dir, std::int64_t iteration);
// "<dir>/latest_checkpointed_iteration.txt".
std::filesystem::path latest_marker(const std::filesystem::path& dir);

// The file a checkpoint path names: `path` itself for a file, or the latest checkpoint of a
// directory. Throws megatron::Error naming the path for a missing path, a directory without a
// marker, a malformed marker or a marker naming a missing file.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);

// Writes the checkpoint of state.iteration into `dir` (created if missing) and then updates the
// latest marker; returns the file written. Throws megatron::Error naming the path on failure,
// leaving any earlier checkpoint untouched (tensors are checked before anything is written).
std::filesystem::path save_checkpoint(const std::filesystem::path& dir,
                                      const CheckpointState& state);

// The iteration in the latest marker; nullopt when `dir` has no marker. A malformed marker or a
// marker naming a missing file throws megatron::Error naming the file.
std::optional<std::int64_t> latest_iteration(const std::filesystem::path& dir);

// Reads a checkpoint file (or, for a directory, its latest). Tensors whose path starts with one
// of `skip_prefixes` (e.g. "optimizer/") are not read. Throws megatron::Error naming the file and
// what is wrong for a missing file, a file that is not HDF5 or not a megatron-app checkpoint, a
// newer format version, or a truncated or corrupt file.
CheckpointState load_checkpoint(const std::filesystem::path& path,
                                const std::vector<std::string>& skip_prefixes = {});

}  // namespace megatron::checkpoint
