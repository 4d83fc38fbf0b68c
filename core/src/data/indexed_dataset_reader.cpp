// Opens and checks an indexed dataset (.idx arrays, .bin size) and reads its sequences.
#include <cstdio>
#include <limits>

#include "data/indexed_dataset_format.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/error.h"

namespace megatron {

using idx_format::load;

struct IndexedDataset::Mapped {
  std::filesystem::path idx_file, bin_file;
  idx_format::MappedFile idx, bin;
  IndexDType dtype{};
  std::size_t itemsize = 0;
  std::uint64_t sequences = 0, document_entries = 0;
  std::size_t lengths_at = 0, pointers_at = 0, documents_at = 0, modes_at = 0;
  bool has_modes = false;

  Mapped(std::filesystem::path idx_path_, std::filesystem::path bin_path_)
      : idx_file(std::move(idx_path_)),
        bin_file(std::move(bin_path_)),
        idx(idx_file),
        bin(bin_file) {
    check_header();
    check_array_sizes();
    check_document_indices();
    check_pointers_and_bin();
  }

  [[noreturn]] void fail_at(std::size_t offset, const std::string& what) const {
    throw Error(idx_file.string() + ": byte " + std::to_string(offset) + ": " + what);
  }

  void check_header() {
    const std::byte* p = idx.data();
    if (idx.size() < idx_format::kHeaderSize) {
      throw Error(idx_file.string() + ": truncated: the header needs " +
                  std::to_string(idx_format::kHeaderSize) + " bytes, the file has " +
                  std::to_string(idx.size()));
    }
    if (std::memcmp(p, idx_format::kMagic.data(), idx_format::kMagic.size()) != 0) {
      std::string found;
      for (std::size_t i = 0; i < idx_format::kMagic.size(); ++i) {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%02X", unsigned(load<std::uint8_t>(p + i)));
        found += (i ? " " : "") + std::string(hex);
      }
      fail_at(0, "expected the magic \"MMIDIDX\\0\\0\" (4D 4D 49 44 49 44 58 00 00), found " +
                     found + " (not a Megatron indexed dataset index)");
    }
    const auto version = load<std::uint64_t>(p + idx_format::kVersionOffset);
    if (version != idx_format::kVersion) {
      fail_at(idx_format::kVersionOffset, "expected version 1, found " + std::to_string(version));
    }
    const auto code = load<std::uint8_t>(p + idx_format::kDTypeOffset);
    if (!idx_format::is_known_dtype(code)) {
      fail_at(idx_format::kDTypeOffset,
              "expected a dtype code 1..8 (uint8, int8, int16, int32, int64, float64, float32, "
              "uint16), found " +
                  std::to_string(code));
    }
    dtype = static_cast<IndexDType>(code);
    itemsize = index_dtype_size(dtype);
    sequences = load<std::uint64_t>(p + idx_format::kSequenceCountOffset);
    document_entries = load<std::uint64_t>(p + idx_format::kDocumentCountOffset);
    if (document_entries == 0) {
      fail_at(idx_format::kDocumentCountOffset,
              "expected at least 1 document index (the leading 0), found 0");
    }
  }

  // Each array must lie inside the file; the arithmetic is checked because N and D are read from
  // the file and may be huge.
  void check_array_sizes() {
    std::size_t end = idx_format::kHeaderSize;
    const auto next_array = [&](const char* name, std::uint64_t count, std::size_t item) {
      const std::size_t start = end;
      std::uint64_t bytes = 0;
      const bool overflow =
          __builtin_mul_overflow(count, item, &bytes) || __builtin_add_overflow(start, bytes, &end);
      if (overflow || end > idx.size()) {
        const std::string needs =
            overflow ? "needs " + std::to_string(count) + " x " + std::to_string(item) + " bytes"
                     : "would end at byte " + std::to_string(end);
        throw Error(idx_file.string() + ": truncated: " + name + " (" + std::to_string(count) +
                    " entries from byte " + std::to_string(start) + ") " + needs +
                    ", but the file has " + std::to_string(idx.size()) + " bytes");
      }
      return start;
    };
    lengths_at = next_array("sequence_lengths", sequences, 4);
    pointers_at = next_array("sequence_pointers", sequences, 8);
    documents_at = next_array("document_indices", document_entries, 8);
    modes_at = end;
    // Megatron writes nothing more, except one mode byte per sequence for multimodal datasets.
    if (idx.size() == end + sequences && sequences > 0) {
      has_modes = true;
    } else if (idx.size() != end) {
      fail_at(end, "expected the end of the file (or " + std::to_string(sequences) +
                       " sequence-mode bytes), found " + std::to_string(idx.size() - end) +
                       " more bytes");
    }
  }

  void check_document_indices() const {
    std::int64_t previous = 0;
    for (std::uint64_t k = 0; k < document_entries; ++k) {
      const std::size_t at = documents_at + 8 * k;
      const auto value = load<std::int64_t>(idx.data() + at);
      const std::string entry = "document_indices[" + std::to_string(k) + "]";
      if (k == 0 && value != 0) fail_at(at, entry + ": expected 0, found " + std::to_string(value));
      if (value < previous) {
        fail_at(at, entry + ": expected a value >= " + std::to_string(previous) +
                        " (document indices never decrease), found " + std::to_string(value));
      }
      previous = value;
    }
    if (std::uint64_t(previous) != sequences) {
      fail_at(documents_at + 8 * (document_entries - 1),
              "document_indices[" + std::to_string(document_entries - 1) + "]: expected " +
                  std::to_string(sequences) + " (the number of sequences), found " +
                  std::to_string(previous));
    }
  }

  void check_pointers_and_bin() const {
    std::uint64_t expected = 0;
    for (std::uint64_t i = 0; i < sequences; ++i) {
      const auto length = load<std::int32_t>(idx.data() + lengths_at + 4 * i);
      if (length < 0) {
        fail_at(lengths_at + 4 * i, "sequence_lengths[" + std::to_string(i) +
                                        "]: expected a length >= 0, found " +
                                        std::to_string(length));
      }
      const std::size_t at = pointers_at + 8 * i;
      const auto pointer = load<std::int64_t>(idx.data() + at);
      if (pointer < 0 || std::uint64_t(pointer) != expected) {
        const std::string rule = i == 0 ? "the first sequence starts the .bin"
                                        : "sequence_pointers[" + std::to_string(i - 1) +
                                              "] + sequence_lengths[" + std::to_string(i - 1) +
                                              "] x " + std::to_string(itemsize) + " bytes";
        fail_at(at, "sequence_pointers[" + std::to_string(i) + "]: expected " +
                        std::to_string(expected) + " (" + rule + "), found " +
                        std::to_string(pointer));
      }
      expected += std::uint64_t(length) * itemsize;
    }
    if (expected > bin.size()) {
      throw Error(bin_file.string() + ": truncated: sequence " + std::to_string(sequences - 1) +
                  " ends at byte " + std::to_string(expected) + " (its pointer + length x " +
                  std::to_string(itemsize) + " bytes, per the .idx), but the file has " +
                  std::to_string(bin.size()) + " bytes");
    }
  }

  void check_range(std::size_t i, std::size_t offset, std::size_t count) const {
    if (i >= sequences) {
      throw Error(bin_file.string() + ": sequence " + std::to_string(i) +
                  " is out of range: the dataset has " + std::to_string(sequences));
    }
    const auto length = std::size_t(load<std::int32_t>(idx.data() + lengths_at + 4 * i));
    if (offset > length || count > length - offset) {
      throw Error(bin_file.string() + ": sequence " + std::to_string(i) + " has " +
                  std::to_string(length) + " tokens; cannot read " + std::to_string(count) +
                  " from token " + std::to_string(offset));
    }
  }

  const std::byte* tokens_of(std::size_t i, std::size_t offset) const {
    const auto pointer = load<std::int64_t>(idx.data() + pointers_at + 8 * i);
    return bin.data() + std::size_t(pointer) + offset * itemsize;
  }

  template <typename Out>
  void convert(std::size_t i, std::size_t offset, std::span<Out> out) const {
    check_range(i, offset, out.size());
    if (out.empty()) return;
    const std::byte* src = tokens_of(i, offset);
    const auto copy = [&]<typename In>(In) {
      for (std::size_t t = 0; t < out.size(); ++t) {
        const In value = load<In>(src + t * sizeof(In));
        if constexpr (sizeof(In) > sizeof(Out)) {
          if (value > In(std::numeric_limits<Out>::max()) ||
              value < In(std::numeric_limits<Out>::min())) {
            throw Error(bin_file.string() + ": sequence " + std::to_string(i) + ", token " +
                        std::to_string(offset + t) + ": value " + std::to_string(value) +
                        " does not fit in int" + std::to_string(8 * sizeof(Out)));
          }
        }
        out[t] = static_cast<Out>(value);
      }
    };
    switch (dtype) {
      case IndexDType::u8:
        return copy(std::uint8_t{});
      case IndexDType::i8:
        return copy(std::int8_t{});
      case IndexDType::i16:
        return copy(std::int16_t{});
      case IndexDType::u16:
        return copy(std::uint16_t{});
      case IndexDType::i32:
        return copy(std::int32_t{});
      case IndexDType::i64:
        return copy(std::int64_t{});
      case IndexDType::f32:
      case IndexDType::f64:
        break;
    }
    throw Error(idx_file.string() + ": holds " + std::string(index_dtype_name(dtype)) +
                " values, not token ids");
  }
};

IndexedDataset::IndexedDataset(const std::string& prefix)
    : IndexedDataset(idx_path(prefix), bin_path(prefix)) {}

IndexedDataset::IndexedDataset(const std::filesystem::path& idx_file,
                               const std::filesystem::path& bin_file)
    : mapped_(std::make_unique<Mapped>(idx_file, bin_file)) {}

IndexedDataset::~IndexedDataset() = default;
IndexedDataset::IndexedDataset(IndexedDataset&&) noexcept = default;
IndexedDataset& IndexedDataset::operator=(IndexedDataset&&) noexcept = default;

IndexDType IndexedDataset::dtype() const {
  return mapped_->dtype;
}
std::size_t IndexedDataset::size() const {
  return mapped_->sequences;
}
std::size_t IndexedDataset::document_count() const {
  return mapped_->document_entries - 1;
}
bool IndexedDataset::has_sequence_modes() const {
  return mapped_->has_modes;
}

std::int32_t IndexedDataset::sequence_length(std::size_t i) const {
  mapped_->check_range(i, 0, 0);
  return load<std::int32_t>(mapped_->idx.data() + mapped_->lengths_at + 4 * i);
}

std::int64_t IndexedDataset::sequence_pointer(std::size_t i) const {
  mapped_->check_range(i, 0, 0);
  return load<std::int64_t>(mapped_->idx.data() + mapped_->pointers_at + 8 * i);
}

std::int64_t IndexedDataset::document_index(std::size_t k) const {
  if (k >= mapped_->document_entries) {
    throw Error(mapped_->idx_file.string() + ": document index " + std::to_string(k) +
                " is out of range: the dataset has " + std::to_string(mapped_->document_entries) +
                " document indices");
  }
  return load<std::int64_t>(mapped_->idx.data() + mapped_->documents_at + 8 * k);
}

std::int8_t IndexedDataset::sequence_mode(std::size_t i) const {
  if (!mapped_->has_modes) throw Error(mapped_->idx_file.string() + ": has no sequence modes");
  mapped_->check_range(i, 0, 0);
  return load<std::int8_t>(mapped_->idx.data() + mapped_->modes_at + i);
}

std::vector<std::int32_t> IndexedDataset::sequence_lengths() const {
  std::vector<std::int32_t> out(size());
  if (!out.empty())
    std::memcpy(out.data(), mapped_->idx.data() + mapped_->lengths_at, 4 * out.size());
  return out;
}

std::vector<std::int64_t> IndexedDataset::sequence_pointers() const {
  std::vector<std::int64_t> out(size());
  if (!out.empty())
    std::memcpy(out.data(), mapped_->idx.data() + mapped_->pointers_at, 8 * out.size());
  return out;
}

std::vector<std::int64_t> IndexedDataset::document_indices() const {
  std::vector<std::int64_t> out(mapped_->document_entries);
  std::memcpy(out.data(), mapped_->idx.data() + mapped_->documents_at, 8 * out.size());
  return out;
}

std::vector<std::int64_t> IndexedDataset::get(std::size_t i) const {
  std::vector<std::int64_t> out(std::size_t(sequence_length(i)));
  read(i, 0, std::span<std::int64_t>(out));
  return out;
}

std::vector<std::int64_t> IndexedDataset::get(std::size_t i, std::size_t offset,
                                              std::size_t length) const {
  mapped_->check_range(i, offset, length);
  std::vector<std::int64_t> out(length);
  read(i, offset, std::span<std::int64_t>(out));
  return out;
}

void IndexedDataset::read(std::size_t i, std::size_t offset, std::span<std::int32_t> out) const {
  mapped_->convert(i, offset, out);
}

void IndexedDataset::read(std::size_t i, std::size_t offset, std::span<std::int64_t> out) const {
  mapped_->convert(i, offset, out);
}

std::span<const std::byte> IndexedDataset::raw(std::size_t i) const {
  const std::size_t length = std::size_t(sequence_length(i));
  if (length == 0) return {};
  return {mapped_->tokens_of(i, 0), length * mapped_->itemsize};
}

const std::filesystem::path& IndexedDataset::idx_file() const {
  return mapped_->idx_file;
}
const std::filesystem::path& IndexedDataset::bin_file() const {
  return mapped_->bin_file;
}

}  // namespace megatron
