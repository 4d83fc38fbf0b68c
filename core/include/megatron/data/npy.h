// Integer index arrays and their .npy files (NumPy format 1.0), the form in which Megatron caches
// its dataset indices, so caches written here load in numpy and numpy's load here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace megatron::data {

enum class IndexDtype { kInt16, kInt32, kUInt32, kInt64 };

std::string_view dtype_name(IndexDtype dtype);  // "int16", "int32", "uint32", "int64"
std::string_view npy_descr(IndexDtype dtype);   // "<i2", "<i4", "<u4", "<i8"
std::size_t dtype_size(IndexDtype dtype);

// A row-major integer array of rank 1 or 2, kept in the dtype Megatron stores it in.
class IndexArray {
 public:
  using Storage = std::variant<std::vector<std::int16_t>, std::vector<std::int32_t>,
                               std::vector<std::uint32_t>, std::vector<std::int64_t>>;

  IndexArray() : IndexArray(std::vector<std::int64_t>{}, {0}) {}
  // Takes the values (one of the four element types) and a shape whose product is their count;
  // throws megatron::Error otherwise.
  template <typename T>
  IndexArray(std::vector<T> values, std::vector<std::size_t> shape)
      : values_(std::move(values)), shape_(std::move(shape)) {
    check_shape();
  }

  IndexDtype dtype() const { return static_cast<IndexDtype>(values_.index()); }
  const std::vector<std::size_t>& shape() const { return shape_; }
  std::size_t size() const {
    return std::visit([](const auto& v) { return v.size(); }, values_);
  }
  std::size_t rows() const { return shape_.at(0); }

  std::int64_t operator[](std::size_t flat_index) const {
    return std::visit(
        [flat_index](const auto& v) { return static_cast<std::int64_t>(v[flat_index]); }, values_);
  }
  // Element (row, column) of a rank-2 array.
  std::int64_t at(std::size_t row, std::size_t column) const {
    return (*this)[row * shape_[1] + column];
  }

  // The values as their stored type; throws megatron::Error if T is not that type.
  template <typename T>
  std::span<const T> values() const {
    if (const auto* v = std::get_if<std::vector<T>>(&values_)) return *v;
    throw_wrong_type(sizeof(T), std::is_signed_v<T>);
  }
  std::span<const std::byte> bytes() const {
    return std::visit([](const auto& v) { return std::as_bytes(std::span(v)); }, values_);
  }

  bool operator==(const IndexArray& other) const = default;

 private:
  void check_shape() const;
  [[noreturn]] void throw_wrong_type(std::size_t element_size, bool element_signed) const;

  Storage values_;
  std::vector<std::size_t> shape_;
};

// Writes the array exactly as numpy.save would (format 1.0, 64-byte aligned header); throws
// megatron::Error when the file cannot be written.
void write_npy(const std::filesystem::path& path, const IndexArray& array);

// Reads a .npy file of a little-endian int16/int32/uint32/int64 array of rank 1 or 2 in C order.
// Anything else, or a truncated or damaged file, is refused with a megatron::Error naming the
// file, the byte offset and what was expected.
IndexArray read_npy(const std::filesystem::path& path);

}  // namespace megatron::data
