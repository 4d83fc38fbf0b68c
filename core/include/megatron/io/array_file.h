// Named arrays in one HDF5 file, for the outputs of the data tools (Retro's chunk database,
// embeddings and neighbours): written whole and atomically, read whole or by rows, with string
// attributes describing what they were made from. Host tensors of f32, f64, i32, i64 or u8.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "megatron/tensor/tensor.h"

namespace megatron::io {

// Writes `arrays` and `attributes` to `file` through `file`.partial, fsync and rename, so a file
// that exists is complete. Throws Error naming the file.
void write_array_file(const std::filesystem::path& file,
                      const std::map<std::string, Tensor>& arrays,
                      const std::map<std::string, std::string>& attributes = {});

// The whole array `name`; Error naming the file and the array when it is missing or unreadable.
Tensor read_array(const std::filesystem::path& file, const std::string& name);
// Rows [first, first + count) of dim 0 of array `name`.
Tensor read_array_rows(const std::filesystem::path& file, const std::string& name,
                       std::int64_t first, std::int64_t count);
// The shape of array `name`.
Shape array_shape(const std::filesystem::path& file, const std::string& name);
// The file's string attributes.
std::map<std::string, std::string> read_array_attributes(const std::filesystem::path& file);

}  // namespace megatron::io
