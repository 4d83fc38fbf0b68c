// Checksummed checkpoints: every tensor is stored with a Fletcher32 checksum per tile; flipped
// bytes inside one tile make exactly the reads that touch it fail, naming the tensor, and
// verify_checkpoint reports it; scalars and empty tensors round-trip.
#include <hdf5.h>

#include <fstream>
#include <vector>

#include "checkpoint_test_util.h"

namespace megatron::checkpoint {
namespace {

using testing::bitwise_equal;
using testing::TempDir;

Tensor ramp(const Shape& shape) {
  return testing::ramp(shape, 0.25f, -3.0f);
}

struct Tile {
  std::vector<hsize_t> origin;  // the tile's first element
  haddr_t address = 0;          // where its first row starts in the file
};

// The tiles of one f32 dataset: its tile shape attribute over its dimensions, row-major, and
// where each tile's first row lies in the contiguous data (Note [Tile digests]).
std::vector<Tile> tiles_of(const std::filesystem::path& file, const std::string& name) {
  std::vector<Tile> out;
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const hid_t space = H5Dget_space(d);
  const auto rank = static_cast<std::size_t>(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(rank), tile(rank);
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  const hid_t attribute = H5Aopen(d, "fletcher32_tile", H5P_DEFAULT);
  if (attribute >= 0 && H5Aread(attribute, H5T_NATIVE_HSIZE, tile.data()) >= 0) {
    const haddr_t offset = H5Dget_offset(d);
    std::vector<hsize_t> origin(rank, 0);
    for (;;) {
      hsize_t element = 0;
      for (std::size_t k = 0; k < rank; ++k)
        element = element * dims[k] + origin[k];
      out.push_back({origin, offset + element * 4});
      std::size_t k = rank;
      while (k-- > 0) {
        origin[k] += tile[k];
        if (origin[k] < dims[k]) break;
        origin[k] = 0;
      }
      if (k == std::size_t(-1)) break;
    }
    H5Aclose(attribute);
  }
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  return out;
}

// Inverts `count` bytes of a tile's first row from its 16th byte on (as bit rot would).
void flip(const std::filesystem::path& file, const Tile& tile, std::size_t count) {
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  const auto start = static_cast<std::streamoff>(tile.address + 16);
  std::vector<char> bytes(count);
  io.seekg(start);
  io.read(bytes.data(), std::streamsize(count));
  for (char& b : bytes)
    b = static_cast<char>(~b);
  io.seekp(start);
  io.write(bytes.data(), std::streamsize(count));
}

std::filesystem::path save_sample(const std::filesystem::path& dir, const Tensor& big) {
  CheckpointState s;
  s.iteration = 3;
  s.tensors["model/big"] = big;
  s.tensors["model/small"] = ramp({5});
  s.tensors["model/scalar"] = Tensor::from(std::vector<float>{2.5f}, {1}).view({});
  s.tensors["model/empty"] = Tensor::empty({0, 4}, DType::f32);
  return save_checkpoint(dir, s);
}

TEST(CheckpointChecksum, EveryTensorIsCheckedAndScalarsAndEmptyTensorsRoundTrip) {
  TempDir dir;
  const Tensor big = ramp({600, 2100});  // several tiles along both dimensions
  const auto file = save_sample(dir.path(), big);
  EXPECT_EQ(tiles_of(file, "model/big").size(), 9u);  // [256, 1024] tiles: 3 x 3

  const VerifyReport report = verify_checkpoint(dir.path());
  EXPECT_TRUE(report.intact());
  EXPECT_TRUE(report.unchecked.empty()) << report.unchecked.front();
  EXPECT_EQ(report.tensors, 4);
  EXPECT_EQ(report.bytes, (600 * 2100 + 5 + 1) * 4);
  EXPECT_EQ(report.iteration, 3);

  const CheckpointState back = load_checkpoint(file);
  EXPECT_TRUE(bitwise_equal(big, back.tensors.at("model/big")));
  EXPECT_EQ(back.tensors.at("model/scalar").shape(), Shape{});
  EXPECT_EQ(back.tensors.at("model/scalar").data<float>()[0], 2.5f);
  EXPECT_EQ(back.tensors.at("model/empty").shape(), (Shape{0, 4}));
  const CheckpointReader reader(file);
  EXPECT_EQ(reader.shape("model/scalar"), Shape{});
}

TEST(CheckpointChecksum, FlippedBytesFailExactlyTheReadsThatTouchThem) {
  TempDir dir;
  const Tensor big = ramp({600, 2100});
  const auto file = save_sample(dir.path(), big);
  // Damage the tile at the far corner: rows from its first row on, columns from its first.
  const std::vector<Tile> tiles = tiles_of(file, "model/big");
  ASSERT_FALSE(tiles.empty());
  const Tile& last = tiles.back();
  ASSERT_GT(last.origin[0], 0u);
  ASSERT_GT(last.origin[1], 0u);
  flip(file, last, 150);  // the tile's first row holds 52 values (208 bytes)

  EXPECT_ERROR_MENTIONING(load_checkpoint(file), file.string(), "tensor 'model/big' is damaged",
                          "fails the checksum written when it was saved");
  try {
    load_checkpoint(file);
  } catch (const CheckpointDamagedError&) {
  } catch (...) {
    ADD_FAILURE() << "a damaged tensor is not a CheckpointDamagedError";
  }

  const CheckpointReader reader(file);
  const auto rows = static_cast<std::int64_t>(last.origin[0]);
  const auto columns = static_cast<std::int64_t>(last.origin[1]);
  // Rows above the damaged tile, every column: intact, and equal to what was saved.
  Tensor above = Tensor::empty({rows, 2100}, DType::f32);
  reader.read_slice("model/big", 0, {{0, 0, rows}}, above);
  EXPECT_TRUE(bitwise_equal(big.slice(0, 0, rows).contiguous(), above));
  // Columns left of it, every row: intact.
  Tensor left = Tensor::empty({600, columns}, DType::f32);
  reader.read_slice("model/big", 1, {{0, 0, columns}}, left);
  EXPECT_TRUE(bitwise_equal(big.slice(1, 0, columns).contiguous(), left));
  // The last rows: they cross the damaged tile.
  Tensor below = Tensor::empty({600 - rows, 2100}, DType::f32);
  EXPECT_ERROR_MENTIONING(reader.read_slice("model/big", 0, {{rows, 0, 600 - rows}}, below),
                          "tensor 'model/big' is damaged");
  Tensor small = Tensor::empty({5}, DType::f32);
  reader.read_slice("model/small", -1, {}, small);
  EXPECT_TRUE(bitwise_equal(ramp({5}), small));

  const VerifyReport report = verify_checkpoint(file);
  ASSERT_EQ(report.damaged.size(), 1u);
  EXPECT_NE(report.damaged[0].find("tensor 'model/big' is damaged"), std::string::npos)
      << report.damaged[0];
  EXPECT_FALSE(report.intact());
}

// Adds dataset `name` of `dims` (float, chunks of `chunk`) to a saved file, writing only its
// first `written` elements: the shape of a damaged dataspace or of a chunk index that lost chunks.
void plant_dataset(const std::filesystem::path& file, const std::string& name,
                   std::vector<hsize_t> dims, hsize_t chunk, hsize_t written) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  std::vector<hsize_t> chunks(dims.size(), 1);
  chunks.back() = chunk;
  H5Pset_chunk(dcpl, int(chunks.size()), chunks.data());
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  const hid_t d =
      H5Dcreate2(f, name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (written > 0) {
    std::vector<float> values(written, 1.0f);
    std::vector<hsize_t> start(dims.size(), 0), count(dims.size(), 1);
    count.back() = written;
    const hid_t memory = H5Screate_simple(int(count.size()), count.data(), nullptr);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    H5Dwrite(d, H5T_NATIVE_FLOAT, memory, space, H5P_DEFAULT, values.data());
    H5Sclose(memory);
  }
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
}

// A damaged dimension can make a dataset claim far more than the file holds (a load would allocate
// it, a verify would have HDF5 fill terabytes of chunks that do not exist). Such a dataset, and one
// whose chunks are partly missing, is refused as damaged before any read or allocation. (A chunk
// whose indexed size is impossible: tests/checkpoint/fixtures/chunk_claims_4GiB.h5.)
TEST(CheckpointChecksum, ADatasetLargerThanWhatIsStoredIsDamaged) {
  TempDir dir;
  const auto file = save_sample(dir.path(), ramp({3, 4}));
  plant_dataset(file, "model/huge", {hsize_t(1) << 20, hsize_t(1) << 30}, 1024, 0);
  EXPECT_ERROR_MENTIONING(load_checkpoint(file), file.string(), "tensor 'model/huge' is damaged",
                          "shape [1048576, 1073741824] needs 4503599627370496 bytes",
                          "more than the whole file holds");
  const CheckpointReader reader(file);
  EXPECT_ERROR_MENTIONING(reader.shape("model/huge"), "tensor 'model/huge' is damaged");
  EXPECT_EQ(reader.shape("model/small"), Shape{5});

  TempDir other;
  const auto partial = save_sample(other.path(), ramp({64, 64}));  // a file of over 16 KiB
  plant_dataset(partial, "model/partial", {4096}, 1024, 1024);
  try {
    load_checkpoint(partial);
    ADD_FAILURE() << "a tensor with missing chunks loaded";
  } catch (const CheckpointDamagedError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'model/partial' is damaged: only 4096 of the "
                                         "16384 bytes of its shape [4096] are stored"),
              std::string::npos)
        << e.what();
  }
  const VerifyReport report = verify_checkpoint(partial);
  ASSERT_EQ(report.damaged.size(), 1u);
  EXPECT_NE(report.damaged[0].find("'model/partial' is damaged: only"), std::string::npos)
      << report.damaged[0];
}

// The config is a fixed-length string in the (checksummed) root object header, not a
// variable-length one in HDF5's unchecksummed global heap, where fuzz/fuzz_checkpoint found a
// damaged heap that kept HDF5 busy for minutes; files that stored it variable-length still load.
TEST(CheckpointChecksum, TheConfigIsAFixedLengthStringAndOlderVariableLengthOnesLoad) {
  TempDir dir;
  CheckpointState s;
  s.iteration = 2;
  s.config_toml = "[training]\nlr = 3e-4 # caf\u00e9\n";
  s.tensors["model/w"] = ramp({2, 2});
  const auto file = save_checkpoint(dir.path(), s);
  {
    const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t a = H5Aopen(f, "config", H5P_DEFAULT);
    const hid_t type = H5Aget_type(a);
    EXPECT_EQ(H5Tis_variable_str(type), 0);
    EXPECT_EQ(H5Tget_size(type), s.config_toml.size() + 1);
    H5Tclose(type);
    H5Aclose(a);
    // Rewrite it as older saves did.
    H5Adelete(f, "config");
    const hid_t vlen = H5Tcopy(H5T_C_S1);
    H5Tset_size(vlen, H5T_VARIABLE);
    H5Tset_cset(vlen, H5T_CSET_UTF8);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t old = H5Acreate2(f, "config", vlen, space, H5P_DEFAULT, H5P_DEFAULT);
    const char* text = "[training]\nlr = 1e-3\n";
    H5Awrite(old, vlen, &text);
    H5Aclose(old);
    H5Sclose(space);
    H5Tclose(vlen);
    H5Fclose(f);
  }
  EXPECT_EQ(load_checkpoint(file).config_toml, "[training]\nlr = 1e-3\n");
  CheckpointState again = s;
  again.iteration = 3;
  EXPECT_EQ(load_checkpoint(save_checkpoint(dir.path(), again)).config_toml, s.config_toml);
}

TEST(CheckpointChecksum, ResumeCandidatesRunFromTheLatestDownward) {
  TempDir dir;
  for (std::int64_t iteration : {2, 10, 4}) {
    CheckpointState s;
    s.iteration = iteration;
    s.tensors["model/w"] = ramp({3});
    save_checkpoint(dir.path(), s);
  }
  std::ofstream(dir.path() / "iter_0000006.h5.partial") << "left by a killed save";
  std::ofstream(dir.path() / "notes.h5") << "not a checkpoint name";
  // The marker names 4 (the last save); 10 is newer than the marker and not a candidate.
  EXPECT_EQ(checkpoints_from_latest(dir.path()),
            (std::vector<std::filesystem::path>{checkpoint_file(dir.path(), 4),
                                                checkpoint_file(dir.path(), 2)}));
  EXPECT_EQ(checkpoints_from_latest(checkpoint_file(dir.path(), 10)),
            std::vector<std::filesystem::path>{checkpoint_file(dir.path(), 10)});
}

}  // namespace
}  // namespace megatron::checkpoint
