// The byte layout of Megatron's .idx (MMIDIDX version 1) and the memory-mapped file it is read
// through; shared by the reader and the writer.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

namespace megatron::idx_format {

// Megatron writes the header little-endian and the arrays in host order; both are little-endian
// on every platform it supports, and this code reads and writes them as host integers.
static_assert(std::endian::native == std::endian::little,
              "the indexed dataset format is little-endian; a big-endian port must byte-swap");

inline constexpr std::array<std::uint8_t, 9> kMagic = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
inline constexpr std::uint64_t kVersion = 1;
inline constexpr std::size_t kVersionOffset = 9;
inline constexpr std::size_t kDTypeOffset = 17;
inline constexpr std::size_t kSequenceCountOffset = 18;
inline constexpr std::size_t kDocumentCountOffset = 26;
inline constexpr std::size_t kHeaderSize = 34;  // sequence_lengths start here

// Reads a T at any alignment (the arrays follow a 34-byte header, so they are not aligned).
template <typename T>
T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

template <typename T>
void store(std::string& out, T value) {
  const auto* p = reinterpret_cast<const char*>(&value);
  out.append(p, sizeof value);
}

bool is_known_dtype(std::uint8_t code);

// A whole file mapped read-only (an empty file maps to nothing). Throws Error naming the file.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace megatron::idx_format
