// .npy files: round trips, numpy's header layout, and refusal of damaged files with a message
// naming the file, the offset and what was expected (numpy's own files are compared in
// megatron_reference.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "expect_error.h"
#include "megatron/data/npy.h"
#include "temp_dir.h"

namespace megatron::data {
namespace {

using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

template <typename T>
void expect_round_trip(const TempDir& dir, std::vector<T> values, std::vector<std::size_t> shape) {
  const IndexArray array(std::move(values), std::move(shape));
  const auto path = dir.path() / "a.npy";
  write_npy(path, array);
  EXPECT_EQ(read_npy(path), array);
}

TEST(Npy, EveryIndexDtypeRoundTrips) {
  TempDir dir;
  expect_round_trip<std::int16_t>(dir, {-32768, 0, 32767}, {3});
  expect_round_trip<std::int32_t>(dir, {1, -2, 3, -4, 5, -6}, {3, 2});
  expect_round_trip<std::uint32_t>(dir, {4294967295u, 0u}, {2});
  expect_round_trip<std::int64_t>(dir, {INT64_MIN, INT64_MAX}, {1, 2});
  expect_round_trip<std::int64_t>(dir, {}, {0, 2});
}

TEST(Npy, HeaderIsNumpysFormat10Layout) {
  TempDir dir;
  const auto path = dir.path() / "a.npy";
  write_npy(path, IndexArray(std::vector<std::int32_t>{1, 2, 3, 4}, {2, 2}));
  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t header_length =
      static_cast<unsigned char>(bytes[8]) |
      (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  EXPECT_EQ((10 + header_length) % 64, 0u);
  const std::string header = bytes.substr(10, header_length);
  EXPECT_EQ(header.rfind("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", 0), 0u);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + header_length + 16);
}

TEST(Npy, ShapeMustHoldTheValues) {
  EXPECT_ERROR_MENTIONING(IndexArray(std::vector<std::int32_t>{1, 2, 3}, {2, 2}),
                          "shape (2, 2) holds 4 elements but 3 values");
  EXPECT_ERROR_MENTIONING(IndexArray(std::vector<std::int32_t>{1}, {1, 1, 1}), "rank 1 or 2");
  const IndexArray array(std::vector<std::int32_t>{1}, {1});
  EXPECT_ERROR_MENTIONING(array.values<std::int64_t>(), "holds int32 values, not int64");
}

class DamagedNpy : public ::testing::Test {
 protected:
  void SetUp() override {
    write_npy(path_, IndexArray(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}, {3, 2}));
    good_ = read_bytes(path_);
    header_length_ = static_cast<unsigned char>(good_[8]) |
                     (static_cast<std::size_t>(static_cast<unsigned char>(good_[9])) << 8);
  }
  // The file with its header text replaced (padded to the same length).
  void write_header(std::string header) {
    header.resize(header_length_ - 1, ' ');
    write_bytes(path_, good_.substr(0, 10) + header + "\n" + good_.substr(10 + header_length_));
  }
  TempDir dir_;
  std::filesystem::path path_ = dir_.path() / "damaged.npy";
  std::string good_;
  std::size_t header_length_ = 0;
};

TEST_F(DamagedNpy, MissingFile) {
  EXPECT_ERROR_MENTIONING(read_npy(dir_.path() / "absent.npy"), "absent.npy", "cannot open");
}

TEST_F(DamagedNpy, TooShortForThePreamble) {
  write_bytes(path_, good_.substr(0, 5));
  EXPECT_ERROR_MENTIONING(read_npy(path_), "damaged.npy", "offset 0", "at least 10 bytes",
                          "found 5 bytes");
}

TEST_F(DamagedNpy, BadMagic) {
  write_bytes(path_, "PK" + good_.substr(2));
  EXPECT_ERROR_MENTIONING(read_npy(path_), "damaged.npy", "offset 0", "\\x93NUMPY");
}

TEST_F(DamagedNpy, UnknownVersion) {
  std::string bytes = good_;
  bytes[6] = 9;
  write_bytes(path_, bytes);
  EXPECT_ERROR_MENTIONING(read_npy(path_), "offset 6", "found 9.0");
}

TEST_F(DamagedNpy, HeaderCutShort) {
  write_bytes(path_, good_.substr(0, 40));
  EXPECT_ERROR_MENTIONING(read_npy(path_), "offset 10", "header of");
}

TEST_F(DamagedNpy, TruncatedData) {
  write_bytes(path_, good_.substr(0, good_.size() - 3));
  EXPECT_ERROR_MENTIONING(read_npy(path_), "damaged.npy", "expected 48 data bytes", "found 45",
                          "truncated");
}

TEST_F(DamagedNpy, TrailingBytes) {
  write_bytes(path_, good_ + "xx");
  EXPECT_ERROR_MENTIONING(read_npy(path_), "found 50", "trailing bytes");
}

TEST_F(DamagedNpy, UnsupportedDtypes) {
  write_header("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }");
  EXPECT_ERROR_MENTIONING(read_npy(path_), "expected an index dtype", "'<f8'");
  write_header("{'descr': '>i8', 'fortran_order': False, 'shape': (3, 2), }");
  EXPECT_ERROR_MENTIONING(read_npy(path_), "'>i8'");
}

TEST_F(DamagedNpy, FortranOrderAndHighRankAreRefused) {
  write_header("{'descr': '<i8', 'fortran_order': True, 'shape': (3, 2), }");
  EXPECT_ERROR_MENTIONING(read_npy(path_), "C-order");
  write_header("{'descr': '<i8', 'fortran_order': False, 'shape': (3, 1, 2), }");
  EXPECT_ERROR_MENTIONING(read_npy(path_), "rank 1 or 2", "(3, 1, 2)");
}

TEST_F(DamagedNpy, GarbledHeaderNamesTheOffset) {
  write_header("{'descr': '<i8', 'fortran_order': Maybe, 'shape': (3, 2), }");
  EXPECT_ERROR_MENTIONING(read_npy(path_), "offset 44", "expected True or False", "found 'M'");
  write_header("{'descr': '<i8', 'shape': (3, 2), }");
  EXPECT_ERROR_MENTIONING(read_npy(path_), "expected the key 'fortran_order'");
  write_header("{'descr': '<i8', 'fortran_order': False, 'shape': (3, 2), 'extra': 1}");
  EXPECT_ERROR_MENTIONING(read_npy(path_), "'extra'");
}

TEST_F(DamagedNpy, KeyOrderAndSpacingAreFree) {
  write_header("{ \"shape\":(3,2) ,'fortran_order':False,'descr':'<i8'}");
  EXPECT_EQ(read_npy(path_).at(2, 1), 6);
}

}  // namespace
}  // namespace megatron::data
