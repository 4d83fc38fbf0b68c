// HDF5 checkpoints: one file per saved iteration holding every tensor under its global name and
// shape, plus the iteration, data position, RNG and the resolved config as attributes. Written to
// a temporary name then renamed, and the latest-iteration marker last, so a crash at any moment
// leaves the previous checkpoint intact.
//
// Note [Checkpoint file layout] (format_version 2)
//   Root attributes: format_version, iteration, consumed_train_samples, consumed_valid_samples,
//   skipped_iterations (64-bit integers) and config (a NUL-terminated fixed-length UTF-8 string,
//   in the checksummed object header; files written before stored it variable-length, still read).
//   CheckpointState::int_attributes[k] is the root attribute "int.<k>" (64-bit integer) and
//   float_attributes[k] is "float.<k>" (IEEE double), so both round-trip bit for bit.
//   A tensor "a/b/c" is dataset c in group /a/b (names may contain dots, e.g.
//   /model/decoder.layers.0.mlp.linear_fc1.weight), of the tensor's shape (a scalar as [1] with
//   attribute `scalar` = 1), contiguous, with a checksum per tile of about 1 MiB in the
//   attributes `fletcher32_tile` and `fletcher32` (Note [Tile digests] in
//   core/src/checkpoint/tile_digests.h); u8 tensors are chunked with HDF5's Fletcher32 filter.
//   Version 1 files (every tensor chunked with the filter, Note [Checksums] in tensor_layout.h;
//   or, written before checksums, contiguous without either) still load, checked where they
//   carry checksums. f32, f64, i32, i64 and u8 are stored natively (little endian);
//   bf16 and f16 are stored as f32 (exact) with a string attribute `dtype` = "bfloat16" or
//   "float16", and converted back on load (values are exact; an f16 NaN comes back as the
//   canonical quiet NaN, a bf16 signalling NaN as quiet).
//   Files are iter_XXXXXXX.h5; saving writes iter_XXXXXXX.h5.partial, fsyncs, renames, then
//   replaces latest_checkpointed_iteration.txt (the bare number, as Megatron writes it) the same
//   way. Leftover *.h5.partial files from an interrupted save are removed by the next save.
//
// Note [Sharded checkpoints]
//   save_checkpoint_sharded writes the same file layout from every rank of a parallel job at once
//   (parallel HDF5 through MPI-IO; the sec2 driver for a single process): every rank creates every
//   dataset collectively at its global shape, then writes only its own hyperslabs (its
//   tensor-parallel shard's runs along partition_dim); replicas (other data-parallel ranks, other
//   tensor-parallel ranks of a replicated tensor) select nothing. Nothing in the file depends on
//   the layout except attributes the caller adds, so CheckpointReader::read_slice loads it at any
//   other layout.
//
// Thread safety: every function may be called from any thread; HDF5 use is serialised by one
// process-wide lock (the HDF5 build is not thread-safe), and HDF5's automatic error printing is
// turned off.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "megatron/nn/parameter.h"
#include "megatron/parallel/communicator.h"
#include "megatron/tensor/tensor.h"

namespace megatron::checkpoint {

// Format version written to the root attribute `format_version`; readers refuse newer majors.
inline constexpr int kFormatVersion = 2;

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

// The checkpoints a resume may try, newest first: for a file just itself; for a directory its
// latest (as resolve_checkpoint) and then every older iter_XXXXXXX.h5 in it by falling iteration.
// Throws as resolve_checkpoint does.
std::vector<std::filesystem::path> checkpoints_from_latest(const std::filesystem::path& path);

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
// newer format version, or a truncated or corrupt file; a tensor whose data fails its checksum
// throws megatron::CheckpointDamagedError naming the file and the tensor.
CheckpointState load_checkpoint(const std::filesystem::path& path,
                                const std::vector<std::string>& skip_prefixes = {});

// What verify_checkpoint found in one file.
struct VerifyReport {
  std::filesystem::path file;
  std::int64_t iteration = 0;
  std::int64_t tensors = 0;  // datasets read
  std::int64_t bytes = 0;    // their stored size
  // One message per damaged tensor, naming it (see Note [Checksums] in tensor_layout.h).
  std::vector<std::string> damaged;
  // Tensors stored without checksums (written before checkpoints carried them): read, unverified.
  std::vector<std::string> unchecked;
  bool intact() const { return damaged.empty(); }
};

// Reads every tensor of a checkpoint file (or a directory's latest) in pieces of bounded size,
// which makes HDF5 check every chunk against the checksum written at save. A file that does not
// open as a checkpoint throws megatron::Error as load_checkpoint does; damaged tensors are
// reported, not thrown.
VerifyReport verify_checkpoint(const std::filesystem::path& path);

// This rank's part of one tensor of a sharded save (see Note [Sharded checkpoints]).
struct TensorSlice {
  Shape global_shape;        // the dataset's shape
  DType dtype = DType::f32;  // as CheckpointState tensors: bf16/f16 stored as f32 + attribute
  // Host data of this rank's part, of global_shape with partition_dim cut to the runs' total
  // (any strides); only read when `write`.
  Tensor local;
  int partition_dim = -1;      // -1: `local` is the whole tensor
  std::vector<ShardRun> runs;  // along partition_dim: where local's rows sit in the tensor
  bool write = true;           // false: another rank writes these values; this one selects nothing
};

// Collective over `world` (every rank calls it, with the same attributes in `state`, whose
// `tensors` must be empty): writes every rank's slices into one iter_XXXXXXX.h5 in `dir`, then
// (world rank 0) renames it into place and updates the latest marker, as save_checkpoint does.
// Every rank gets the same result: the file, or a megatron::Error naming what is wrong (a tensor
// declared with different shapes or dtypes on two ranks, a problem on any rank) with any earlier
// checkpoint untouched. A world of one process uses the sec2 driver, without MPI.
std::filesystem::path save_checkpoint_sharded(const std::filesystem::path& dir,
                                              const CheckpointState& state,
                                              const std::map<std::string, TensorSlice>& slices,
                                              Communicator& world);

// Reads a checkpoint piece by piece: attributes at once, tensors (or slices of them) on demand.
// Opening checks the file as load_checkpoint does, with the same errors.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::filesystem::path& path);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::filesystem::path& file() const { return file_; }
  // Root attributes; `tensors` is empty.
  const CheckpointState& attributes() const { return attributes_; }
  // Every dataset path ("model/...", "optimizer/..."), sorted.
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& name) const;
  // The stored shape; throws megatron::Error naming the file when there is no such tensor.
  Shape shape(const std::string& name) const;
  // Reads the runs along partition_dim (-1: the whole tensor) of tensor `name` into `out`, a
  // contiguous host tensor of the slice's shape, converting to out's dtype. Throws megatron::Error
  // naming the file and tensor when it is missing, the slice is out of range or `out` does not
  // match; megatron::CheckpointDamagedError when a chunk it reads fails its checksum.
  void read_slice(const std::string& name, int partition_dim, const std::vector<ShardRun>& runs,
                  Tensor& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::filesystem::path file_;
  CheckpointState attributes_;
  std::vector<std::string> names_;
};

}  // namespace megatron::checkpoint
