// Direct chunk I/O (Note [Direct chunk I/O]): fletcher32() equals the checksum HDF5's own filter
// stores, for every length and content; chunks written directly read back through HDF5's filter
// pipeline (which checks them); chunks HDF5 wrote, or stored without the checksum, load too. The
// files are written as format_version 1 wrote every tensor (uint8 tensors are still stored so):
// loads must keep reading them.
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/chunk_io.h"
#include "checkpoint/fletcher32.h"
#include "checkpoint/hdf5_util.h"
#include "checkpoint/tensor_io.h"
#include "checkpoint/tensor_layout.h"
#include "checkpoint_test_util.h"

namespace megatron::checkpoint {
namespace {

using testing::bitwise_equal;
using testing::TempDir;

// A checkpoint as format_version 1 wrote it: every tensor in Fletcher32 chunks, written by
// write_chunks.
std::filesystem::path save_version1(const std::filesystem::path& dir, const CheckpointState& s) {
  const std::filesystem::path file = checkpoint_file(dir, s.iteration);
  detail::Hdf5Lock lock;
  detail::Handle fapl = detail::file_access_properties();
  detail::Handle f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  detail::write_state_attributes(f.get(), s);
  H5Adelete(f.get(), "format_version");
  detail::write_int_attribute(f.get(), "format_version", 1);
  for (const auto& [name, tensor] : s.tensors) {
    const detail::StoredTypes types = detail::stored_types(tensor.dtype());
    const std::vector<hsize_t> dims = detail::stored_dims(tensor.shape());
    const std::size_t element_bytes = H5Tget_size(types.file);
    detail::Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
    detail::Handle dcpl = detail::chunked_creation_properties(dims, element_bytes);
    detail::Handle d(H5Dcreate2(f.get(), name.c_str(), types.file, space.get(), H5P_DEFAULT,
                                dcpl.get(), H5P_DEFAULT),
                     H5Dclose);
    detail::write_chunks(d.get(), name, dims, element_bytes, tensor.raw_data());
  }
  return file;
}

// The checksum HDF5's Fletcher32 filter appends to one chunk holding `bytes`: written through
// H5Dwrite into a one-chunk uint8 dataset, then read raw with H5Dread_chunk.
std::uint32_t hdf5_fletcher32(const std::filesystem::path& file,
                              const std::vector<unsigned char>& bytes) {
  const hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t n = bytes.size();
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &n);
  H5Pset_fletcher32(dcpl);
  const hid_t d = H5Dcreate2(f, "d", H5T_NATIVE_UINT8, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  EXPECT_GE(H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), 0);
  std::vector<unsigned char> raw(bytes.size() + 4);
  const hsize_t origin = 0;
  std::uint32_t filters = 0;
  EXPECT_GE(H5Dread_chunk(d, H5P_DEFAULT, &origin, &filters, raw.data()), 0);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
  std::uint32_t stored = 0;
  for (std::size_t i = 0; i < 4; ++i)
    stored |= std::uint32_t(raw[bytes.size() + i]) << (8 * i);
  return stored;
}

TEST(Fletcher32, EqualsTheChecksumHdf5sFilterStores) {
  TempDir dir;
  std::mt19937 random(7);
  // Lengths around the lane width (64 bytes), HDF5's 360-word block and the 32-lane x 360-step
  // block, odd lengths, and a whole 1 MiB chunk; contents all zero, all ones (the sums' fold to
  // 65535), sparse and random.
  std::vector<std::size_t> lengths = {1,
                                      2,
                                      3,
                                      63,
                                      64,
                                      65,
                                      127,
                                      719,
                                      720,
                                      721,
                                      1440,
                                      23039,
                                      23040,
                                      23041,
                                      46081,
                                      100001,
                                      std::size_t(1) << 20};
  for (int i = 0; i < 12; ++i)
    lengths.push_back(1 + random() % 300000);
  int cases = 0;
  for (const std::size_t length : lengths) {
    for (int content = 0; content < 4; ++content) {
      std::vector<unsigned char> bytes(length);
      for (unsigned char& b : bytes) {
        b = content == 0   ? 0
            : content == 1 ? 0xff
            : content == 2 ? (random() % 97 == 0 ? static_cast<unsigned char>(random()) : 0)
                           : static_cast<unsigned char>(random());
      }
      const auto file = dir.path() / ("c" + std::to_string(cases++) + ".h5");
      EXPECT_EQ(detail::fletcher32(bytes.data(), bytes.size()), hdf5_fletcher32(file, bytes))
          << "length " << length << ", content " << content;
    }
  }
}

// A chunk read in scattered pieces (rows of a tile, window boundaries) is checked piece by piece.
TEST(Fletcher32, PiecesGiveTheValueOfTheWhole) {
  std::mt19937 random(7);
  for (const std::size_t length : {std::size_t(0), std::size_t(1), std::size_t(2), std::size_t(64),
                                   std::size_t(721), std::size_t(46081), std::size_t(1) << 20}) {
    std::vector<unsigned char> bytes(length);
    for (unsigned char& b : bytes)
      b = static_cast<unsigned char>(random());
    for (int cut = 0; cut < 8; ++cut) {
      detail::Fletcher32 sum;
      std::size_t at = 0;
      while (at < length) {
        // Pieces of 1 byte up to past a lane block (23040 bytes), of odd lengths too.
        std::size_t piece = 1 + random() % (cut < 4 ? 80 : 30000);
        if (at + piece >= length) piece = length - at;
        sum.add(bytes.data() + at, piece);
        at += piece;
      }
      EXPECT_EQ(sum.value(), detail::fletcher32(bytes.data(), length)) << length << " " << cut;
    }
  }
}

// A save sums a chunk's rows while it gathers them: the copy holds every byte and the sum is the
// whole's, for pieces of any length and alignment.
TEST(Fletcher32, CopyingPiecesCopiesThemAndGivesTheValueOfTheWhole) {
  std::mt19937 random(11);
  for (const std::size_t length : {std::size_t(1), std::size_t(63), std::size_t(4096),
                                   std::size_t(46081), std::size_t(1) << 20}) {
    std::vector<unsigned char> bytes(length);
    for (unsigned char& b : bytes)
      b = static_cast<unsigned char>(random());
    for (int cut = 0; cut < 4; ++cut) {
      // One byte of slack before the copy, so pieces land at every alignment.
      std::vector<unsigned char> copy(length + 1, 0xAB);
      detail::Fletcher32 sum;
      std::size_t at = 0;
      while (at < length) {
        std::size_t piece = 1 + random() % (cut < 2 ? 200 : 50000);
        if (at + piece >= length) piece = length - at;
        sum.add_copy(copy.data() + 1 + at, bytes.data() + at, piece);
        at += piece;
      }
      EXPECT_EQ(sum.value(), detail::fletcher32(bytes.data(), length)) << length << " " << cut;
      EXPECT_EQ(copy[0], 0xAB);
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), copy.begin() + 1)) << length << " " << cut;
    }
  }
}

// A tile's rows inside a tensor (pieces at a stride) sum as their concatenation, with or without
// a copy to rows at another stride (16-byte aligned or not; ordinary or streaming stores), for
// rows of whole 64-byte steps (summed on across the rows' ends, blocks cut inside rows) or not,
// after a piece of odd length or not.
TEST(Fletcher32, RowsAtAStrideGiveTheValueOfTheirConcatenation) {
  std::mt19937 random(13);
  for (const std::size_t row_bytes : {std::size_t(64), std::size_t(640), std::size_t(1808),
                                      std::size_t(4096), std::size_t(23040 + 64)}) {
    for (const std::size_t rows :
         {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(90)}) {
      for (const std::size_t lead : {std::size_t(0), std::size_t(3), std::size_t(64)}) {
        const std::size_t stride = row_bytes + 2 * (random() % 300);
        std::vector<unsigned char> tensor(lead + rows * stride);
        for (unsigned char& b : tensor)
          b = static_cast<unsigned char>(random());
        std::vector<unsigned char> whole(tensor.begin(), tensor.begin() + std::ptrdiff_t(lead));
        for (std::size_t r = 0; r < rows; ++r) {
          const auto row = tensor.begin() + std::ptrdiff_t(lead + r * stride);
          whole.insert(whole.end(), row, row + std::ptrdiff_t(row_bytes));
        }
        {
          detail::Fletcher32 sum;
          sum.add(tensor.data(), lead);  // 3: a byte left pending
          sum.add_rows(tensor.data() + lead, row_bytes, stride, rows);
          EXPECT_EQ(sum.value(), detail::fletcher32(whole.data(), whole.size()))
              << row_bytes << " x " << rows << ", lead " << lead;
        }
        // Copies to rows 16-byte aligned (streaming stores where asked) and not.
        for (const std::size_t to_stride : {row_bytes + 6, row_bytes}) {
          for (const detail::CopyStores stores :
               {detail::CopyStores::cached, detail::CopyStores::streaming}) {
            std::vector<unsigned char> buffer(rows * to_stride + 64, 0xAB);
            unsigned char* copy = buffer.data() + (64 - std::uintptr_t(buffer.data()) % 64) % 64;
            detail::Fletcher32 sum;
            sum.add(tensor.data(), lead);
            sum.add_rows(tensor.data() + lead, row_bytes, stride, rows, copy, to_stride, stores);
            const auto where =
                ::testing::Message()
                << row_bytes << " x " << rows << ", lead " << lead << ", copied at " << to_stride
                << (stores == detail::CopyStores::streaming ? " streaming" : " cached");
            EXPECT_EQ(sum.value(), detail::fletcher32(whole.data(), whole.size())) << where;
            for (std::size_t r = 0; r < rows; ++r) {
              EXPECT_TRUE(std::equal(whole.begin() + std::ptrdiff_t(lead + r * row_bytes),
                                     whole.begin() + std::ptrdiff_t(lead + (r + 1) * row_bytes),
                                     copy + r * to_stride))
                  << where << ", row " << r;
              if (to_stride > row_bytes) {
                EXPECT_EQ(copy[r * to_stride + row_bytes], 0xAB) << where;
              }
            }
          }
        }
      }
    }
  }
}

TEST(Fletcher32, AcceptsTheByteSwappedValueOldHdf5Wrote) {
  EXPECT_TRUE(detail::fletcher32_accepts(0x12345678u, 0x12345678u));
  EXPECT_TRUE(detail::fletcher32_accepts(0x34127856u, 0x12345678u));
  EXPECT_FALSE(detail::fletcher32_accepts(0x56781234u, 0x12345678u));
  EXPECT_FALSE(detail::fletcher32_accepts(0x12345679u, 0x12345678u));
}

// Every dataset of `file` read with H5Dread, so HDF5's filter checks each chunk's checksum.
std::vector<float> hdf5_read(const std::filesystem::path& file, const std::string& name,
                             std::size_t count) {
  std::vector<float> out(count);
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const herr_t status = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  H5Dclose(d);
  H5Fclose(f);
  EXPECT_GE(status, 0) << name;
  return out;
}

TEST(DirectChunks, ChunksWrittenHereReadBackThroughHdf5sFilter) {
  TempDir dir;
  CheckpointState s;
  s.iteration = 1;
  // Edge chunks in every dimension, a 1-D tensor longer than one chunk, a 3-D one; chunks that
  // are contiguous runs of the tensor (read in place) before a partial one and at the very end.
  const std::vector<Shape> shapes = {{700, 2500}, {300001}, {3, 300, 1500}, {1},
                                     {5, 7},      {524288}, {600, 1000}};
  for (std::size_t i = 0; i < shapes.size(); ++i)
    s.tensors["t" + std::to_string(i)] = testing::ramp(shapes[i], 0.37f, -11.0f);
  s.tensors["ids"] = Tensor::from(std::vector<std::int64_t>{1, -2, std::int64_t(1) << 60}, {3});
  const auto file = save_version1(dir.path(), s);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const Tensor& t = s.tensors.at("t" + std::to_string(i));
    const std::vector<float> read =
        hdf5_read(file, "t" + std::to_string(i), static_cast<std::size_t>(t.numel()));
    EXPECT_EQ(std::memcmp(read.data(), t.raw_data(), t.nbytes()), 0) << shapes[i].size();
  }
  const CheckpointState loaded = load_checkpoint(file);
  for (const auto& [name, tensor] : s.tensors)
    EXPECT_TRUE(bitwise_equal(loaded.tensors.at(name), tensor)) << name;
  EXPECT_TRUE(verify_checkpoint(file).damaged.empty());
}

// Rewrites chunk [0, 0] of dataset `name` through HDF5's filter pipeline (H5Dwrite of that
// region), or raw without the checksum (the filter marked skipped in the chunk's mask).
void rewrite_first_chunk(const std::filesystem::path& file, const std::string& name,
                         const Tensor& tensor, bool skip_checksum) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const hid_t dcpl = H5Dget_create_plist(d);
  hsize_t chunk[2] = {0, 0};
  H5Pget_chunk(dcpl, 2, chunk);
  const hsize_t columns = static_cast<hsize_t>(tensor.shape()[1]);
  std::vector<float> data(chunk[0] * chunk[1]);
  for (hsize_t r = 0; r < chunk[0]; ++r)
    for (hsize_t c = 0; c < chunk[1]; ++c)
      data[r * chunk[1] + c] = tensor.data<float>()[r * columns + c];
  const hsize_t origin[2] = {0, 0};
  if (skip_checksum) {
    EXPECT_GE(H5Dwrite_chunk(d, H5P_DEFAULT, 1, origin, data.size() * 4, data.data()), 0);
  } else {
    const hid_t file_space = H5Dget_space(d);
    const hid_t memory_space = H5Screate_simple(2, chunk, nullptr);
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, origin, nullptr, chunk, nullptr);
    EXPECT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, memory_space, file_space, H5P_DEFAULT, data.data()), 0);
    H5Sclose(memory_space);
    H5Sclose(file_space);
  }
  H5Pclose(dcpl);
  H5Dclose(d);
  H5Fclose(f);
}

TEST(DirectChunks, ChunksHdf5WroteOrStoredWithoutTheChecksumLoadToo) {
  for (const bool skip_checksum : {false, true}) {
    TempDir dir;
    CheckpointState s;
    s.iteration = 2;
    s.tensors["w"] = testing::ramp({600, 2100}, 0.5f, 1.0f);
    const auto file = save_version1(dir.path(), s);
    rewrite_first_chunk(file, "w", s.tensors.at("w"), skip_checksum);
    const CheckpointState loaded = load_checkpoint(file);
    EXPECT_TRUE(bitwise_equal(loaded.tensors.at("w"), s.tensors.at("w"))) << skip_checksum;
    EXPECT_TRUE(verify_checkpoint(file).damaged.empty()) << skip_checksum;
  }
}

TEST(DirectChunks, SlicesAlongAnyDimensionReadOnlyTheirRows) {
  TempDir dir;
  CheckpointState s;
  s.iteration = 1;
  s.tensors["w"] = testing::ramp({700, 2500}, 0.37f, -11.0f);
  s.tensors["cube"] = testing::ramp({3, 300, 1500}, 0.5f, 2.0f);
  const auto file = save_version1(dir.path(), s);
  testing::expect_slices_read_back(file, s);
}

// Whole chunks start on 4 KiB boundaries of the file, so the kernel's copies between the page
// cache and a tensor are aligned (Note [Direct chunk I/O]); small ones are packed.
TEST(DirectChunks, LargeChunksStartOnPageBoundaries) {
  TempDir dir;
  CheckpointState s;
  s.iteration = 1;
  s.tensors["wide"] = testing::ramp({600, 2500}, 0.5f, 1.0f);  // 1 MiB tiles and edge tiles
  s.tensors["small"] = testing::ramp({5, 7}, 0.5f, 1.0f);
  const auto file = save_version1(dir.path(), s);
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, "wide", H5P_DEFAULT);
  const hid_t space = H5Dget_space(d);
  hsize_t chunks = 0;
  ASSERT_GE(H5Dget_num_chunks(d, space, &chunks), 0);
  EXPECT_EQ(chunks, 9u);  // [256, 1024] tiles: 3 x 3
  for (hsize_t i = 0; i < chunks; ++i) {
    hsize_t offset[2] = {}, size = 0;
    unsigned mask = 0;
    haddr_t address = 0;
    ASSERT_GE(H5Dget_chunk_info(d, space, i, offset, &mask, &address, &size), 0);
    EXPECT_EQ(address % 4096, 0u) << "chunk " << i << " at " << address;
  }
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
}

}  // namespace
}  // namespace megatron::checkpoint
