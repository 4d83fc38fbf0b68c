// Writes an indexed dataset exactly as Megatron's IndexedDatasetBuilder does (.bin as sequences
// arrive, .idx at finalize), so the bytes match files made by Megatron-LM for the same input.
#include <cerrno>
#include <limits>
#include <utility>

#include "data/indexed_dataset_format.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/error.h"

namespace megatron {

namespace {

constexpr std::size_t kBinBufferBytes = 1 << 20;

void write_whole_file(const std::filesystem::path& path, const std::string& bytes) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) throw Error(path.string() + ": cannot create: " + std::strerror(errno));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  const int write_error = errno;
  if (std::fclose(file) != 0 || !written) {
    throw Error(path.string() + ": write failed: " + std::strerror(written ? errno : write_error));
  }
}

}  // namespace

IndexedDatasetWriter::IndexedDatasetWriter(const std::filesystem::path& bin_file, IndexDType dtype)
    : bin_file_(bin_file), dtype_(dtype) {
  if (!idx_format::is_known_dtype(static_cast<std::uint8_t>(dtype))) {
    throw Error(bin_file_.string() + ": unknown dtype code " + std::to_string(int(dtype)));
  }
  if (dtype == IndexDType::f32 || dtype == IndexDType::f64) {
    throw Error(bin_file_.string() + ": cannot store token ids as " +
                std::string(index_dtype_name(dtype)));
  }
  bin_ = std::fopen(bin_file_.c_str(), "wb");
  if (!bin_) throw Error(bin_file_.string() + ": cannot create: " + std::strerror(errno));
  std::setvbuf(bin_, nullptr, _IOFBF, kBinBufferBytes);
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (bin_) std::fclose(bin_);
}

void IndexedDatasetWriter::write_bytes(const void* data, std::size_t size) {
  if (!bin_) throw Error(bin_file_.string() + ": the writer was already finalized");
  if (size > 0 && std::fwrite(data, 1, size, bin_) != size) {
    throw Error(bin_file_.string() + ": write failed: " + std::strerror(errno));
  }
}

template <typename T>
void IndexedDatasetWriter::write_tokens(std::span<const T> tokens) {
  const std::size_t itemsize = index_dtype_size(dtype_);
  buffer_.resize(tokens.size() * itemsize);
  const auto convert = [&]<typename Stored>(Stored) {
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      if (!std::in_range<Stored>(tokens[t])) {
        throw Error(bin_file_.string() + ": token " + std::to_string(tokens[t]) + " (sequence " +
                    std::to_string(sequence_lengths_.size()) + ", position " + std::to_string(t) +
                    ") does not fit the dataset's dtype " + std::string(index_dtype_name(dtype_)));
      }
      const Stored value = static_cast<Stored>(tokens[t]);
      std::memcpy(buffer_.data() + t * sizeof value, &value, sizeof value);
    }
  };
  switch (dtype_) {
    case IndexDType::u8:
      convert(std::uint8_t{});
      break;
    case IndexDType::i8:
      convert(std::int8_t{});
      break;
    case IndexDType::i16:
      convert(std::int16_t{});
      break;
    case IndexDType::u16:
      convert(std::uint16_t{});
      break;
    case IndexDType::i32:
      convert(std::int32_t{});
      break;
    case IndexDType::i64:
      convert(std::int64_t{});
      break;
    case IndexDType::f32:
    case IndexDType::f64:
      break;  // refused by the constructor
  }
  write_bytes(buffer_.data(), buffer_.size());
  tokens_written_ += tokens.size();
}

void IndexedDatasetWriter::push_length(std::uint64_t length) {
  if (length > std::uint64_t(std::numeric_limits<std::int32_t>::max())) {
    throw Error(bin_file_.string() + ": sequence " + std::to_string(sequence_lengths_.size()) +
                " has " + std::to_string(length) + " tokens; the .idx stores lengths as int32");
  }
  sequence_lengths_.push_back(std::int32_t(length));
}

void IndexedDatasetWriter::add_item(std::span<const std::int32_t> tokens) {
  write_tokens(tokens);
  push_length(tokens.size());
}

void IndexedDatasetWriter::add_item(std::span<const std::int64_t> tokens) {
  write_tokens(tokens);
  push_length(tokens.size());
}

void IndexedDatasetWriter::end_document() {
  document_indices_.push_back(std::int64_t(sequence_lengths_.size()));
}

void IndexedDatasetWriter::add_document(std::span<const std::int32_t> tokens,
                                        std::span<const std::int64_t> lengths) {
  std::uint64_t total = 0;
  for (const std::int64_t length : lengths) {
    if (length < 0) {
      throw Error(bin_file_.string() + ": add_document: negative sequence length " +
                  std::to_string(length));
    }
    total += std::uint64_t(length);
  }
  if (total != tokens.size()) {
    throw Error(bin_file_.string() + ": add_document: the lengths sum to " + std::to_string(total) +
                " but there are " + std::to_string(tokens.size()) + " tokens");
  }
  write_tokens(tokens);
  for (const std::int64_t length : lengths)
    push_length(std::uint64_t(length));
  end_document();
}

void IndexedDatasetWriter::add_index(const std::string& prefix) {
  const IndexedDataset other(prefix);
  if (other.dtype() != dtype_) {
    throw Error(other.idx_file().string() + ": add_index: its dtype is " +
                std::string(index_dtype_name(other.dtype())) + ", this dataset's is " +
                std::string(index_dtype_name(dtype_)));
  }
  const std::int64_t offset = std::int64_t(sequence_lengths_.size());
  std::uint64_t tokens = 0;
  for (const std::int32_t length : other.sequence_lengths()) {
    push_length(std::uint64_t(length));
    tokens += std::uint64_t(length);
  }
  const auto documents = other.document_indices();
  for (std::size_t k = 1; k < documents.size(); ++k)
    document_indices_.push_back(offset + documents[k]);
  // Only the bytes the other .idx points at: they are the whole .bin of a well-formed dataset.
  for (std::size_t i = 0; i < other.size(); ++i) {
    const auto bytes = other.raw(i);
    write_bytes(bytes.data(), bytes.size());
  }
  tokens_written_ += tokens;
}

void IndexedDatasetWriter::finalize(const std::filesystem::path& idx_file) {
  if (!bin_) throw Error(bin_file_.string() + ": the writer was already finalized");
  const bool flushed = std::fflush(bin_) == 0 && !std::ferror(bin_);
  const int flush_error = errno;
  const bool closed = std::fclose(bin_) == 0;
  bin_ = nullptr;
  if (!flushed || !closed) {
    throw Error(bin_file_.string() +
                ": write failed: " + std::strerror(flushed ? errno : flush_error));
  }

  const std::size_t n = sequence_lengths_.size();
  const std::size_t itemsize = index_dtype_size(dtype_);
  std::string idx;
  idx.reserve(idx_format::kHeaderSize + 12 * n + 8 * document_indices_.size());
  idx.append(reinterpret_cast<const char*>(idx_format::kMagic.data()), idx_format::kMagic.size());
  idx_format::store<std::uint64_t>(idx, idx_format::kVersion);
  idx_format::store<std::uint8_t>(idx, static_cast<std::uint8_t>(dtype_));
  idx_format::store<std::uint64_t>(idx, n);
  idx_format::store<std::uint64_t>(idx, document_indices_.size());
  for (const std::int32_t length : sequence_lengths_)
    idx_format::store(idx, length);
  std::int64_t pointer = 0;
  for (const std::int32_t length : sequence_lengths_) {
    idx_format::store(idx, pointer);
    pointer += std::int64_t(length) * std::int64_t(itemsize);
  }
  for (const std::int64_t boundary : document_indices_)
    idx_format::store(idx, boundary);
  write_whole_file(idx_file, idx);
}

}  // namespace megatron
