// A check of the global heap collections of an HDF5 file, made before HDF5 1.10 reads a
// variable-length string from one: a damaged collection can make HDF5 loop forever.
#pragma once

#include <filesystem>
#include <string>

namespace megatron::checkpoint::detail {

// Note [Global heap check]
//   Variable-length strings (the string attributes of checkpoints written before they became
//   fixed-length) live in HDF5 global heap collections, which carry no checksum. HDF5 1.10
//   decodes a collection's object list with a loop that never ends when an object's size is 0
//   or runs past the collection (fuzz/fuzz_checkpoint found it: minutes inside H5HG_read), so
//   before such a read every collection in the file is walked here the way HDF5 walks it and
//   refused if that walk would not end at the collection's end. Collections are found by their
//   signature and version ("GCOL", 1: HDF5 does not read the three reserved bytes after them),
//   which raw tensor bytes match with a probability of 2^-40 per offset; such a match counts as
//   a collection only with zero reserved bytes (2^-64) or a size that fits the file. The file is
//   scanned once per size and modification time.

// Why the global heap collections of `file` are damaged (naming the offset), or "" when every
// collection decodes (or there is none). Not thread-safe: callers hold the HDF5 lock.
std::string global_heap_damage(const std::filesystem::path& file);

}  // namespace megatron::checkpoint::detail
