// .npy reading and writing for integer index arrays (NumPy format versions 1.0 to 3.0 read,
// 1.0 written byte for byte as numpy.save does).
#include "megatron/data/npy.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "megatron/error.h"

namespace megatron::data {

static_assert(std::endian::native == std::endian::little,
              ".npy files are written from host memory and declared little-endian");

namespace {

constexpr std::array<char, 6> kMagic = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
// numpy aligns the data to 64 bytes and leaves room for the first axis to grow to 21 digits.
constexpr std::size_t kArrayAlign = 64;
constexpr std::size_t kGrowthAxisMaxDigits = 21;

std::string shape_repr(const std::vector<std::size_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

std::string quote_text(std::string_view text) {
  std::string out = "'";
  for (unsigned char c : text) {
    if (std::isprint(c)) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out + "'";
}

// A reader over the header dictionary, a Python literal such as
// {'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }
class HeaderParser {
 public:
  HeaderParser(const std::filesystem::path& path, std::string_view text, std::size_t file_offset)
      : path_(path), text_(text), base_(file_offset) {}

  struct Fields {
    std::optional<std::string> descr;
    std::optional<bool> fortran_order;
    std::optional<std::vector<std::size_t>> shape;
  };

  Fields parse() {
    Fields fields;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::size_t key_at = pos_;
      const std::string key = parse_string();
      expect(':');
      skip_space();
      if (key == "descr") {
        fields.descr = parse_string();
      } else if (key == "fortran_order") {
        fields.fortran_order = parse_bool();
      } else if (key == "shape") {
        fields.shape = parse_shape();
      } else {
        fail(key_at, "a key 'descr', 'fortran_order' or 'shape'", quote_text(key));
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail(pos_, "',' or '}'", found());
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size()) fail(pos_, "the end of the header after '}'", found());
    return fields;
  }

  [[noreturn]] void fail(std::size_t at, std::string_view expected, std::string_view got) const {
    throw Error(path_.string() + ": offset " + std::to_string(base_ + at) +
                ": damaged .npy header: expected " + std::string(expected) + ", found " +
                std::string(got));
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  std::string found() const {
    return pos_ < text_.size() ? quote_text(text_.substr(pos_, 1)) : "the end of the header";
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(pos_, quote_text(std::string_view(&c, 1)), found());
    ++pos_;
  }
  std::string parse_string() {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(pos_, "a quoted string", found());
    const std::size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) fail(pos_, "a closing quote", "the end of the header");
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return value;
  }
  bool parse_bool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail(pos_, "True or False", found());
  }
  std::vector<std::size_t> parse_shape() {
    std::vector<std::size_t> shape;
    expect('(');
    while (true) {
      skip_space();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail(pos_, "a dimension", found());
      std::size_t value = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        const std::size_t digit = static_cast<std::size_t>(text_[pos_] - '0');
        if (value > (SIZE_MAX - digit) / 10) fail(pos_, "a dimension that fits 64 bits", found());
        value = value * 10 + digit;
        ++pos_;
      }
      shape.push_back(value);
      skip_space();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != ')') {
        fail(pos_, "',' or ')'", found());
      }
    }
    ++pos_;
    return shape;
  }

  const std::filesystem::path& path_;
  std::string_view text_;
  std::size_t base_;
  std::size_t pos_ = 0;
};

std::optional<IndexDtype> dtype_from_descr(std::string_view descr) {
  for (IndexDtype dtype :
       {IndexDtype::kInt16, IndexDtype::kInt32, IndexDtype::kUInt32, IndexDtype::kInt64}) {
    if (npy_descr(dtype) == descr) return dtype;
  }
  return std::nullopt;
}

template <typename T>
IndexArray array_from_bytes(const char* data, std::size_t count, std::vector<std::size_t> shape) {
  std::vector<T> values(count);
  // An empty vector's data() may be null, which memcpy must not see even for zero bytes.
  if (count > 0) std::memcpy(values.data(), data, count * sizeof(T));
  return IndexArray(std::move(values), std::move(shape));
}

std::uint64_t read_le(const std::string& bytes, std::size_t offset, std::size_t width) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < width; ++i) {
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  }
  return value;
}

}  // namespace

std::string_view dtype_name(IndexDtype dtype) {
  switch (dtype) {
    case IndexDtype::kInt16:
      return "int16";
    case IndexDtype::kInt32:
      return "int32";
    case IndexDtype::kUInt32:
      return "uint32";
    case IndexDtype::kInt64:
      return "int64";
  }
  return "unknown";
}

std::string_view npy_descr(IndexDtype dtype) {
  switch (dtype) {
    case IndexDtype::kInt16:
      return "<i2";
    case IndexDtype::kInt32:
      return "<i4";
    case IndexDtype::kUInt32:
      return "<u4";
    case IndexDtype::kInt64:
      return "<i8";
  }
  return "";
}

std::size_t dtype_size(IndexDtype dtype) {
  switch (dtype) {
    case IndexDtype::kInt16:
      return 2;
    case IndexDtype::kInt32:
      return 4;
    case IndexDtype::kUInt32:
      return 4;
    case IndexDtype::kInt64:
      return 8;
  }
  return 0;
}

void IndexArray::check_shape() const {
  if (shape_.empty() || shape_.size() > 2) {
    throw Error("an index array has rank 1 or 2, not " + std::to_string(shape_.size()));
  }
  std::size_t count = 1;
  for (std::size_t extent : shape_)
    count *= extent;
  if (count != size()) {
    throw Error("index array shape " + shape_repr(shape_) + " holds " + std::to_string(count) +
                " elements but " + std::to_string(size()) + " values were given");
  }
}

void IndexArray::throw_wrong_type(std::size_t element_size, bool element_signed) const {
  throw Error("index array holds " + std::string(dtype_name(dtype())) + " values, not " +
              (element_signed ? "int" : "uint") + std::to_string(8 * element_size));
}

void write_npy(const std::filesystem::path& path, const IndexArray& array) {
  std::string header = "{'descr': '" + std::string(npy_descr(array.dtype())) +
                       "', 'fortran_order': False, 'shape': " + shape_repr(array.shape()) + ", }";
  header.append(kGrowthAxisMaxDigits - std::to_string(array.shape()[0]).size(), ' ');
  const std::size_t preamble = kMagic.size() + 2 + 2;
  const std::size_t unpadded = preamble + header.size() + 1;
  header.append((kArrayAlign - unpadded % kArrayAlign) % kArrayAlign, ' ');
  header += '\n';
  if (header.size() > 0xFFFF) {
    throw Error(path.string() + ": .npy header of " + std::to_string(header.size()) +
                " bytes does not fit format 1.0");
  }

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path.string() + ": cannot open for writing");
  const char version_and_length[4] = {1, 0, static_cast<char>(header.size() & 0xFF),
                                      static_cast<char>(header.size() >> 8)};
  out.write(kMagic.data(), kMagic.size());
  out.write(version_and_length, 4);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  const auto data = array.bytes();
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) throw Error(path.string() + ": write failed (disk full?)");
}

IndexArray read_npy(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open for reading");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string name = path.string();

  if (bytes.size() < 10) {
    throw Error(name + ": offset 0: expected a .npy file of at least 10 bytes, found " +
                std::to_string(bytes.size()) + " bytes");
  }
  if (!std::equal(kMagic.begin(), kMagic.end(), bytes.begin())) {
    throw Error(name + ": offset 0: expected the .npy magic \\x93NUMPY, found " +
                quote_text(std::string_view(bytes).substr(0, 6)));
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    throw Error(name + ": offset 6: expected .npy format version 1.0, 2.0 or 3.0, found " +
                std::to_string(major) + "." + std::to_string(minor));
  }
  const std::size_t length_width = major == 1 ? 2 : 4;
  const std::size_t header_begin = 8 + length_width;
  if (bytes.size() < header_begin) {
    throw Error(name + ": offset 8: expected the header length, found the end of the file");
  }
  const std::size_t header_length = read_le(bytes, 8, length_width);
  if (bytes.size() < header_begin + header_length) {
    throw Error(name + ": offset " + std::to_string(header_begin) + ": expected a header of " +
                std::to_string(header_length) + " bytes, found " +
                std::to_string(bytes.size() - header_begin) + " bytes before the end of the file");
  }
  const std::string_view header = std::string_view(bytes).substr(header_begin, header_length);
  HeaderParser parser(path, header, header_begin);
  const HeaderParser::Fields fields = parser.parse();
  if (!fields.descr) parser.fail(header.size(), "the key 'descr'", "none");
  if (!fields.fortran_order) parser.fail(header.size(), "the key 'fortran_order'", "none");
  if (!fields.shape) parser.fail(header.size(), "the key 'shape'", "none");

  const std::optional<IndexDtype> dtype = dtype_from_descr(*fields.descr);
  if (!dtype) {
    throw Error(name + ": offset " + std::to_string(header_begin) +
                ": expected an index dtype ('<i2', '<i4', '<u4' or '<i8'), found " +
                quote_text(*fields.descr));
  }
  const std::vector<std::size_t>& shape = *fields.shape;
  if (shape.empty() || shape.size() > 2) {
    throw Error(name + ": offset " + std::to_string(header_begin) +
                ": expected a shape of rank 1 or 2, found " + shape_repr(shape));
  }
  if (*fields.fortran_order && shape.size() == 2 && shape[0] > 1 && shape[1] > 1) {
    throw Error(name + ": offset " + std::to_string(header_begin) +
                ": expected a C-order array, found fortran_order True");
  }

  std::size_t count = 1;
  for (std::size_t extent : shape) {
    if (extent != 0 && count > SIZE_MAX / extent) {
      throw Error(name + ": offset " + std::to_string(header_begin) + ": shape " +
                  shape_repr(shape) + " is too large");
    }
    count *= extent;
  }
  const std::size_t data_begin = header_begin + header_length;
  const std::size_t expected = count * dtype_size(*dtype);
  const std::size_t available = bytes.size() - data_begin;
  if (available != expected) {
    throw Error(name + ": offset " + std::to_string(data_begin) + ": expected " +
                std::to_string(expected) + " data bytes for a " + std::string(dtype_name(*dtype)) +
                " array of shape " + shape_repr(shape) + ", found " + std::to_string(available) +
                (available < expected ? " (the file is truncated)" : " (trailing bytes)"));
  }

  const char* data = bytes.data() + data_begin;
  switch (*dtype) {
    case IndexDtype::kInt16:
      return array_from_bytes<std::int16_t>(data, count, shape);
    case IndexDtype::kInt32:
      return array_from_bytes<std::int32_t>(data, count, shape);
    case IndexDtype::kUInt32:
      return array_from_bytes<std::uint32_t>(data, count, shape);
    case IndexDtype::kInt64:
      return array_from_bytes<std::int64_t>(data, count, shape);
  }
  throw Error(name + ": unsupported dtype");
}

}  // namespace megatron::data
