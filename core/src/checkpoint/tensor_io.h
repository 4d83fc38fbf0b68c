// Tensor-level helpers shared by the whole-file and the sharded checkpoint writers.
#pragma once

#include <hdf5.h>

#include <filesystem>
#include <map>
#include <string>
#include <system_error>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/tensor/tensor.h"

namespace megatron::checkpoint::detail {

// The root attributes of a checkpoint: format version, progress, config, int.* / float.*.
void write_state_attributes(hid_t root, const CheckpointState& state);

// Why a tensor path or tensor cannot be stored; empty when it can.
std::string tensor_problem(const std::string& name, const Tensor& tensor,
                           const std::map<std::string, Tensor>& all);

// What is written: a contiguous host copy (exact, byte by byte), bf16/f16 widened to f32.
Tensor stored_form(const Tensor& tensor);

struct StoredTypes {
  hid_t file;
  hid_t memory;
};
// File and memory HDF5 types a tensor of `dtype` is stored with (bf16/f16: f32).
StoredTypes stored_types(DType dtype);

// Removes the temporary file unless the save got it renamed into place.
class PartialFile {
 public:
  explicit PartialFile(std::filesystem::path path, bool owner = true)
      : path_(std::move(path)), owner_(owner) {}
  ~PartialFile() {
    std::error_code ignored;
    if (owner_ && !done_ && std::filesystem::is_regular_file(path_, ignored))
      std::filesystem::remove(path_, ignored);
  }
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;
  const std::filesystem::path& path() const { return path_; }
  void done() { done_ = true; }

 private:
  std::filesystem::path path_;
  bool owner_ = true;  // only one rank of a parallel save removes it
  bool done_ = false;
};

}  // namespace megatron::checkpoint::detail
