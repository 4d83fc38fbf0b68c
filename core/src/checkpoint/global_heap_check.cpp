// Walks every global heap collection of an HDF5 file as HDF5 1.10 decodes it (Note [Global heap
// check]): a hand-written reader of this one structure, because HDF5 has no call that checks a
// collection without decoding it, and decoding a damaged one is what hangs.
#include "checkpoint/global_heap_check.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string_view>
#include <vector>

namespace megatron::checkpoint::detail {

namespace {

namespace fs = std::filesystem;

// The collection header: signature, version 1, three reserved bytes, then the collection's size
// (8 bytes, little-endian: checkpoints use 8-byte lengths); each object: index (2 bytes),
// reference count (2), reserved (4), size (8), data padded to 8 bytes. HDF5 skips the reserved
// bytes unread, so a collection is found by its signature and version alone.
constexpr std::string_view kSignature("GCOL\x01", 5);
constexpr std::uint64_t kHeaderBytes = 16;
constexpr std::uint64_t kObjectHeaderBytes = 16;
constexpr std::uint64_t kMinimumCollection = 4096;  // HDF5 never makes a smaller one

std::uint64_t little_endian(const char* p, int bytes) {
  std::uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i)
    value = (value << 8) | static_cast<unsigned char>(p[i]);
  return value;
}

// Why the collection at `offset` would not decode, or "".
std::string collection_damage(std::ifstream& in, std::uint64_t offset, std::uint64_t file_bytes) {
  char header[kHeaderBytes];
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset));
  if (!in.read(header, kHeaderBytes)) return "";  // a header cut by the end of the file: not one
  const std::uint64_t size = little_endian(header + 8, 8);
  if (size < kMinimumCollection || size > file_bytes - offset) {
    // Reserved bytes that are not zero with a size that cannot be: raw tensor bytes that match
    // the signature (2^-40 per offset), not a collection. Every collection HDF5 writes has zero
    // reserved bytes; fuzz/fuzz_checkpoint found one changed there and decoded all the same.
    if (std::memcmp(header + kSignature.size(), "\0\0\0", 3) != 0) return "";
    return fmt::format("the global heap collection at offset {} claims {} bytes ({} to {} fit)",
                       offset, size, kMinimumCollection, file_bytes - offset);
  }
  std::vector<char> collection(size);
  in.seekg(static_cast<std::streamoff>(offset));
  if (!in.read(collection.data(), static_cast<std::streamsize>(size))) {
    return fmt::format("the global heap collection at offset {} cannot be read", offset);
  }
  std::uint64_t at = kHeaderBytes;
  while (at < size) {
    if (at + kObjectHeaderBytes > size) break;  // too small for an object: free space
    const std::uint64_t index = little_endian(collection.data() + at, 2);
    const std::uint64_t object = little_endian(collection.data() + at + 8, 8);
    // An object's header and its data padded to 8 bytes; the free-space object (index 0) counts
    // its own header in its size.
    const std::uint64_t need =
        index == 0 ? object
                   : (object > size ? size + 1 : kObjectHeaderBytes + (object + 7) / 8 * 8);
    if (need == 0 || need > size - at) {
      return fmt::format(
          "the global heap collection at offset {} has an object at byte {} of {} bytes "
          "in a collection of {}",
          offset, at, object, size);
    }
    at += need;
  }
  return "";
}

std::string scan(const fs::path& file, std::uint64_t file_bytes) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return "";  // HDF5 opened it; its own read will report what is wrong
  std::ifstream collections(file, std::ios::binary);
  constexpr std::size_t kBlock = std::size_t(4) << 20;
  std::vector<char> block(kBlock + kSignature.size());
  std::size_t carried = 0;  // bytes kept from the previous block, where a header may start
  std::uint64_t block_offset = 0;
  while (in) {
    in.read(block.data() + carried, static_cast<std::streamsize>(kBlock));
    const std::size_t filled = carried + static_cast<std::size_t>(in.gcount());
    const std::string_view view(block.data(), filled);
    for (std::size_t at = view.find(kSignature); at != std::string_view::npos;
         at = view.find(kSignature, at + 1)) {
      if (std::string damage = collection_damage(collections, block_offset + at, file_bytes);
          !damage.empty()) {
        return damage;
      }
    }
    carried = std::min(filled, kSignature.size() - 1);
    std::memmove(block.data(), block.data() + filled - carried, carried);
    block_offset += filled - carried;
  }
  return "";
}

}  // namespace

std::string global_heap_damage(const fs::path& file) {
  struct Scanned {
    std::uintmax_t bytes;
    fs::file_time_type modified;
    std::string damage;
  };
  static std::map<std::string, Scanned> scanned;  // guarded by the HDF5 lock the callers hold
  std::error_code error;
  const std::uintmax_t bytes = fs::file_size(file, error);
  const fs::file_time_type modified = fs::last_write_time(file, error);
  if (error) return "";
  const auto found = scanned.find(file.string());
  if (found != scanned.end() && found->second.bytes == bytes &&
      found->second.modified == modified) {
    return found->second.damage;
  }
  std::string damage = scan(file, bytes);
  scanned[file.string()] = Scanned{bytes, modified, damage};
  return damage;
}

}  // namespace megatron::checkpoint::detail
