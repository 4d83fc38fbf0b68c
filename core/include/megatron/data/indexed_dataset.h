// Megatron's indexed dataset (MMIDIDX version 1): a .bin of concatenated token sequences and a
// .idx of their lengths, byte offsets and document boundaries. Reader (mmap) and writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace megatron {

// The dtype codes of the .idx header (Megatron's DType enum).
enum class IndexDType : std::uint8_t {
  u8 = 1,
  i8 = 2,
  i16 = 3,
  i32 = 4,
  i64 = 5,
  f64 = 6,
  f32 = 7,
  u16 = 8,
};

std::size_t index_dtype_size(IndexDType dtype);
std::string_view index_dtype_name(IndexDType dtype);  // numpy's name: "uint16", "int32", ...
// Megatron's optimal_dtype: uint16 when every id fits (vocab < 65500), otherwise int32.
IndexDType optimal_index_dtype(std::size_t vocab_size);

// "P" -> "P.idx" / "P.bin".
std::filesystem::path idx_path(const std::string& prefix);
std::filesystem::path bin_path(const std::string& prefix);

// Builds a dataset as Megatron's IndexedDatasetBuilder does: sequences go to the .bin as they
// are added, the .idx is written by finalize(). Files are byte-identical to Megatron's for the
// same calls. Throws Error naming the file on I/O failure or a token that does not fit the dtype.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::filesystem::path& bin_file, IndexDType dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one sequence (it joins the current document).
  void add_item(std::span<const std::int32_t> tokens);
  void add_item(std::span<const std::int64_t> tokens);
  // Closes the current document: records the sequence count as a document boundary.
  void end_document();
  // Appends `tokens` as sequences of `lengths` (which must sum to tokens.size()), then closes the
  // document. Empty spans make an empty document (the boundary repeats), as in Megatron.
  void add_document(std::span<const std::int32_t> tokens, std::span<const std::int64_t> lengths);
  // Appends every sequence and document of the dataset at `prefix`, which must have this dtype
  // (Megatron's add_index, used to merge datasets).
  void add_index(const std::string& prefix);
  // Flushes and closes the .bin and writes the .idx. The writer is unusable afterwards.
  void finalize(const std::filesystem::path& idx_file);

  IndexDType dtype() const { return dtype_; }
  std::size_t sequence_count() const { return sequence_lengths_.size(); }
  std::size_t document_count() const { return document_indices_.size() - 1; }
  std::uint64_t tokens_written() const { return tokens_written_; }

 private:
  template <typename T>
  void write_tokens(std::span<const T> tokens);
  void write_bytes(const void* data, std::size_t size);
  void push_length(std::uint64_t length);

  std::filesystem::path bin_file_;
  IndexDType dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<std::int32_t> sequence_lengths_;
  std::vector<std::int64_t> document_indices_{0};
  std::uint64_t tokens_written_ = 0;
  std::vector<char> buffer_;  // tokens converted to the dtype before writing
};

// A read-only, memory-mapped dataset. Opening checks the whole .idx (magic, version, dtype,
// array sizes, pointers against lengths, document indices) and the .bin size, and refuses a bad
// file with an Error naming the file, the byte offset and what was expected.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);  // prefix.idx + prefix.bin
  IndexedDataset(const std::filesystem::path& idx_file, const std::filesystem::path& bin_file);
  ~IndexedDataset();
  IndexedDataset(IndexedDataset&&) noexcept;
  IndexedDataset& operator=(IndexedDataset&&) noexcept;

  IndexDType dtype() const;
  std::size_t size() const;            // number of sequences N
  std::size_t document_count() const;  // D - 1
  bool has_sequence_modes() const;     // the optional multimodal byte per sequence

  // Element access into the .idx arrays (which are not aligned in the file, hence no spans).
  std::int32_t sequence_length(std::size_t i) const;
  std::int64_t sequence_pointer(std::size_t i) const;  // byte offset in the .bin
  std::int64_t document_index(std::size_t k) const;    // k in [0, D]; first 0, last N
  std::int8_t sequence_mode(std::size_t i) const;      // only with has_sequence_modes()
  std::vector<std::int32_t> sequence_lengths() const;
  std::vector<std::int64_t> sequence_pointers() const;
  std::vector<std::int64_t> document_indices() const;

  // Sequence i, or `length` tokens of it from token `offset`, converted to int64.
  std::vector<std::int64_t> get(std::size_t i) const;
  std::vector<std::int64_t> get(std::size_t i, std::size_t offset, std::size_t length) const;
  // The same into caller memory (out.size() tokens from `offset`); the int32 form throws if a
  // stored value does not fit. Float datasets hold no token ids: these throw for them.
  void read(std::size_t i, std::size_t offset, std::span<std::int32_t> out) const;
  void read(std::size_t i, std::size_t offset, std::span<std::int64_t> out) const;
  // Sequence i as stored (len * itemsize bytes of the .bin).
  std::span<const std::byte> raw(std::size_t i) const;

  const std::filesystem::path& idx_file() const;
  const std::filesystem::path& bin_file() const;

 private:
  struct Mapped;
  std::unique_ptr<Mapped> mapped_;
};

}  // namespace megatron
