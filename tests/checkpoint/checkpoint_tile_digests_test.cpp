// Tile digests (Note [Tile digests]): each tile's value is Fletcher32's two sums over the tile's
// bytes whatever order and cut its runs come in (so ranks' parts add up to the whole); saves store
// contiguous data with those values; slices along any dimension read back exactly and only
// check the tiles they touch; damaged or missing checksum attributes are damage.
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "checkpoint/fletcher32.h"
#include "checkpoint/mapped_range.h"
#include "checkpoint/tensor_layout.h"
#include "checkpoint/tile_digests.h"
#include "checkpoint/trailing_sums.h"
#include "checkpoint_test_util.h"
#include "megatron/backend/backend.h"

namespace megatron::checkpoint {
namespace {

using TileRun = detail::Run;
using detail::TileDigests;
using detail::TileGrid;
using testing::bitwise_equal;
using testing::TempDir;

// Bytes that are not all alike: i * 2654435761 per element, so every tile sums differently.
std::vector<float> values(std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i)
    v[i] = static_cast<float>((i * 2654435761u) % 100003) * 0.01f - 500.0f;
  return v;
}

// Every tile's value computed the plain way: the tile's bytes gathered row-major and summed in
// one piece.
std::vector<std::uint32_t> gathered_digests(const TileGrid& grid, const char* tensor) {
  std::vector<std::uint32_t> out;
  const std::size_t rank = grid.dims.size();
  std::vector<hsize_t> origin(rank, 0);
  for (;;) {
    std::vector<char> bytes;
    std::vector<hsize_t> index(origin);
    std::vector<hsize_t> extent(rank);
    for (std::size_t k = 0; k < rank; ++k)
      extent[k] = std::min(grid.tile[k], grid.dims[k] - origin[k]);
    // Every element of the tile in row-major order within it.
    std::vector<hsize_t> at(rank, 0);
    for (;;) {
      hsize_t element = 0;
      for (std::size_t k = 0; k < rank; ++k)
        element = element * grid.dims[k] + origin[k] + at[k];
      const char* p = tensor + element * grid.element_bytes;
      bytes.insert(bytes.end(), p, p + grid.element_bytes);
      std::size_t k = rank;
      while (k-- > 0) {
        if (++at[k] < extent[k]) break;
        at[k] = 0;
      }
      if (k == std::size_t(-1)) break;
    }
    detail::Fletcher32 sum;
    sum.add(bytes.data(), bytes.size());
    out.push_back(std::uint32_t(sum.sum2() << 16) | std::uint32_t(sum.sum1()));
    std::size_t k = rank;
    while (k-- > 0) {
      origin[k] += grid.tile[k];
      if (origin[k] < grid.dims[k]) break;
      origin[k] = 0;
    }
    if (k == std::size_t(-1)) break;
  }
  return out;
}

TEST(TileDigests, RunsInAnyOrderAndCutGiveEachTilesSums) {
  for (const std::vector<hsize_t>& dims :
       std::vector<std::vector<hsize_t>>{{700, 2500}, {3, 300, 1500}, {300001}, {5, 7}}) {
    const TileGrid grid{dims, detail::chunk_dims(dims, 4), 4};
    const std::vector<float> v =
        values(std::accumulate(dims.begin(), dims.end(), std::size_t(1), std::multiplies<>()));
    const char* bytes = reinterpret_cast<const char*>(v.data());
    std::vector<std::pair<TileRun, std::size_t>> runs;
    detail::for_each_selected_run(grid, -1, {}, [&](const TileRun& run, std::size_t at) {
      runs.push_back({run, at});
    });
    // Backwards, each run cut in two uneven pieces (a run of whole lines may be cut mid-line).
    TileDigests sums(grid);
    const hsize_t columns = dims.back();
    for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
      const auto& [run, at] = *it;
      const hsize_t first = run.elements / 3, second = run.column + first;
      if (first > 0) sums.add({run.line, run.column, first}, bytes + at);
      sums.add({run.line + second / columns, second % columns, run.elements - first},
               bytes + at + first * 4);
    }
    EXPECT_EQ(sums.digests(), gathered_digests(grid, bytes)) << dims.size() << "-D";
  }
}

// What each rank of a sharded save does: sums the runs of its own part (rows of `runs` along
// `dim`, laid out as the part's own tensor), and the all-reduce adds the ranks' sums.
TEST(TileDigests, RanksPartsAddUpToTheWholeTensorsSums) {
  const std::vector<hsize_t> dims = {700, 2500};
  const TileGrid grid{dims, detail::chunk_dims(dims, 4), 4};
  const std::vector<float> whole = values(700 * 2500);
  const std::vector<std::uint32_t> expected =
      gathered_digests(grid, reinterpret_cast<const char*>(whole.data()));
  // Three ranks cutting columns unevenly (one with two runs), then two cutting rows.
  const std::vector<std::pair<int, std::vector<std::vector<ShardRun>>>> layouts = {
      {1, {{{0, 0, 1000}}, {{1000, 0, 300}, {2000, 300, 500}}, {{1300, 0, 700}}}},
      {0, {{{0, 0, 333}}, {{333, 0, 367}}}},
  };
  for (const auto& [dim, parts] : layouts) {
    TileDigests total(grid);
    for (const std::vector<ShardRun>& runs : parts) {
      // The part as its rank holds it: the runs' rows along dim, at their local offsets.
      std::int64_t rows = 0;
      for (const ShardRun& run : runs)
        rows += run.length;
      const std::int64_t lines = dim == 0 ? rows : 700, columns = dim == 1 ? rows : 2500;
      std::vector<float> part(std::size_t(lines * columns));
      for (const ShardRun& run : runs) {
        for (std::int64_t k = 0; k < run.length; ++k) {
          for (std::int64_t other = 0; other < (dim == 0 ? 2500 : 700); ++other) {
            const std::int64_t g = run.global_offset + k, l = run.local_offset + k;
            part[std::size_t(dim == 0 ? l * columns + other : other * columns + l)] =
                whole[std::size_t(dim == 0 ? g * 2500 + other : other * 2500 + g)];
          }
        }
      }
      TileDigests mine(grid);
      const char* bytes = reinterpret_cast<const char*>(part.data());
      detail::for_each_selected_run(
          grid, dim, runs, [&](const TileRun& run, std::size_t at) { mine.add(run, bytes + at); });
      for (std::size_t t = 0; t < mine.sums().size(); ++t) {
        total.sums()[t].a += mine.sums()[t].a;
        total.sums()[t].b += mine.sums()[t].b;
      }
    }
    total.normalize();
    EXPECT_EQ(total.digests(), expected) << "cut along " << dim;
  }
}

TEST(TileDigests, SavesStoreContiguousCheckedDataThatSlicesReadAtAnyCut) {
  TempDir dir;
  CheckpointState s;
  s.iteration = 1;
  s.tensors["w"] = testing::ramp({700, 2500}, 0.37f, -11.0f);
  s.tensors["cube"] = testing::ramp({3, 300, 1500}, 0.5f, 2.0f);
  s.tensors["ids"] = Tensor::from(std::vector<std::int64_t>{1, -2, std::int64_t(1) << 60}, {3});
  s.tensors["mask"] = Tensor::from(std::vector<std::uint8_t>{1, 0, 1, 1, 0}, {5});
  const auto file = save_checkpoint(dir.path(), s);
  {
    // Contiguous, starting on a 4 KiB boundary (the kernel copies aligned buffers fastest), with
    // the digests of the bytes as stored; uint8 keeps Fletcher32-filtered chunks.
    detail::Hdf5Lock lock;
    const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, "w", H5P_DEFAULT);
    const hid_t dcpl = H5Dget_create_plist(d);
    EXPECT_EQ(H5Pget_layout(dcpl), H5D_CONTIGUOUS);
    EXPECT_EQ(H5Dget_offset(d) % 4096, 0u);
    detail::StoredTiles tiles;
    EXPECT_EQ(detail::read_tile_attributes(d, "w", {700, 2500}, 4, tiles), "");
    EXPECT_EQ(tiles.digests,
              gathered_digests(tiles.grid, static_cast<const char*>(s.tensors.at("w").raw_data())));
    const hid_t mask = H5Dopen2(f, "mask", H5P_DEFAULT);
    EXPECT_FALSE(detail::has_tile_digests(mask));
    EXPECT_TRUE(detail::has_checksum(mask));
    H5Dclose(mask);
    H5Pclose(dcpl);
    H5Dclose(d);
    H5Fclose(f);
  }
  const CheckpointState loaded = load_checkpoint(file);
  for (const auto& [name, tensor] : s.tensors)
    EXPECT_TRUE(bitwise_equal(loaded.tensors.at(name), tensor)) << name;
  const VerifyReport report = verify_checkpoint(file);
  EXPECT_TRUE(report.intact());
  EXPECT_TRUE(report.unchecked.empty());

  testing::expect_slices_read_back(file, s);
  const CheckpointReader reader(file);
  EXPECT_ERROR_MENTIONING(
      [&] {
        Tensor three = Tensor::empty({3, 2500}, DType::f32);
        reader.read_slice("w", 0, {{0, 0, 2}, {1, 2, 1}}, three);
      }(),
      "two runs read the same rows");
}

// Stored digests of dataset `name`, and where its data starts.
detail::StoredTiles stored_tiles(const std::filesystem::path& file, const std::string& name,
                                 const std::vector<hsize_t>& dims) {
  detail::Hdf5Lock lock;
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  detail::StoredTiles tiles;
  EXPECT_EQ(detail::read_tile_attributes(d, name, dims, 4, tiles), "");
  H5Dclose(d);
  H5Fclose(f);
  return tiles;
}

// Note [Sums beside the transfer]: with one thread or two, saves store the digests of a plain
// gather-and-sum and whole loads (two threads: a read beside the sums trailing it on the load's
// helper thread) and slices read back exactly.
TEST(TileDigests, OneThreadOrTwoGiveTheSameDigestsAndData) {
  const int previous = compute_threads();
  std::vector<std::vector<std::uint32_t>> digests;
  for (const int threads : {1, 2}) {
    set_compute_threads(threads);
    ASSERT_EQ(detail::TrailingSums().active(), threads == 2);
    TempDir dir;
    CheckpointState s;
    s.iteration = 1;
    s.tensors["w"] = testing::ramp({700, 2500}, 0.37f, -11.0f);  // 6.7 MiB: many windows
    s.tensors["cube"] = testing::ramp({3, 300, 1500}, 0.5f, 2.0f);
    const auto file = save_checkpoint(dir.path(), s);
    const detail::StoredTiles tiles = stored_tiles(file, "w", {700, 2500});
    EXPECT_EQ(tiles.digests,
              gathered_digests(tiles.grid, static_cast<const char*>(s.tensors.at("w").raw_data())))
        << threads << " threads";
    digests.push_back(tiles.digests);
    const CheckpointState loaded = load_checkpoint(file);
    for (const auto& [name, tensor] : s.tensors)
      EXPECT_TRUE(bitwise_equal(loaded.tensors.at(name), tensor)) << name;
    testing::expect_slices_read_back(file, s);
  }
  set_compute_threads(previous);
  EXPECT_EQ(digests[0], digests[1]);
}

// What read_with_digests gives by `method` for a selection of `w` [rows, columns] (dim -1: the
// whole tensor; out null: the check alone), from the page cache or `cold`: the bytes read and
// the verdict.
struct ReadResult {
  std::vector<float> data;
  std::string verdict;
};
ReadResult read_by(const std::filesystem::path& file, const detail::StoredTiles& tiles, int dim,
                   const std::vector<ShardRun>& runs, std::size_t elements, bool keep,
                   detail::ReadMethod method, bool cold = false) {
  ReadResult result;
  result.data.assign(elements, -1.0f);
  const int fd = ::open(file.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  // From the disk: the file's pages dropped from the page cache (a save syncs them first).
  if (cold) {
    EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  }
  // With two compute threads a whole tensor's sums trail its read on the helper.
  detail::TrailingSums trailing;
  result.verdict = detail::read_with_digests(fd, tiles.offset, tiles.grid, tiles.digests,
                                             keep ? result.data.data() : nullptr, dim, runs, "w",
                                             method, &trailing);
  const std::string trailed = trailing.finish();
  if (result.verdict.empty()) result.verdict = trailed;
  ::close(fd);
  return result;
}

// Note [Mapped reads]: reads through a mapping give the bytes and the verdicts of windows read
// with pread and summed in turn, for whole tensors, slices along either dimension, the check
// alone, and damage below, inside and above a selection.
TEST(TileDigests, MappedReadsEqualWindowedReads) {
  TempDir dir;
  CheckpointState s;
  s.iteration = 1;
  const hsize_t rows = 700, columns = 2500;
  s.tensors["w"] = testing::ramp({int64_t(rows), int64_t(columns)}, 0.37f, -11.0f);
  const auto file = save_checkpoint(dir.path(), s);
  const detail::StoredTiles tiles = stored_tiles(file, "w", {rows, columns});
  const std::vector<float> whole = s.tensors.at("w").to_vector<float>();
  struct Case {
    int dim;
    std::vector<ShardRun> runs;
    std::size_t elements;
  };
  const std::vector<Case> cases = {
      {-1, {}, rows * columns},
      {0, {{0, 0, 512}}, 512 * columns},
      {0, {{600, 0, 100}, {3, 100, 7}}, 107 * columns},
      {1, {{1000, 0, 1300}, {0, 1300, 10}}, 1310 * rows},
  };
  // With two threads a whole tensor is read beside the sums that trail it; with one, copied and
  // summed in one pass.
  const int previous = compute_threads();
  const auto expect_same = [&](const char* state) {
    for (const int threads : {1, 2}) {
      set_compute_threads(threads);
      for (const Case& c : cases) {
        for (const bool keep : {true, false}) {
          const ReadResult windows =
              read_by(file, tiles, c.dim, c.runs, c.elements, keep, detail::ReadMethod::windows);
          for (const bool cold : {false, true}) {
            const ReadResult mapped = read_by(file, tiles, c.dim, c.runs, c.elements, keep,
                                              detail::ReadMethod::mapped, cold);
            EXPECT_EQ(mapped.verdict, windows.verdict)
                << state << ", dim " << c.dim << ", " << threads << " threads, cold " << cold;
            EXPECT_EQ(std::memcmp(mapped.data.data(), windows.data.data(), c.elements * 4), 0)
                << state << ", dim " << c.dim << ", " << threads << " threads, cold " << cold;
          }
        }
      }
    }
    set_compute_threads(previous);
  };
  expect_same("intact");
  const ReadResult all =
      read_by(file, tiles, -1, {}, rows * columns, true, detail::ReadMethod::mapped);
  EXPECT_EQ(all.verdict, "");
  EXPECT_EQ(std::memcmp(all.data.data(), whole.data(), whole.size() * 4), 0);
  const ReadResult first_rows =
      read_by(file, tiles, 0, {{0, 0, 512}}, 512 * columns, true, detail::ReadMethod::mapped);
  EXPECT_EQ(std::memcmp(first_rows.data.data(), whole.data(), 512 * columns * 4), 0);

  // One byte changed in the last row: the whole tensor and the slices through it fail, the rows
  // above it read.
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const off_t last = off_t(tiles.offset + rows * columns * 4 - 3);
  char byte = 0;
  ASSERT_EQ(::pread(fd, &byte, 1, last), 1);
  byte = char(byte ^ 0x10);
  ASSERT_EQ(::pwrite(fd, &byte, 1, last), 1);
  ::close(fd);
  expect_same("damaged");
  EXPECT_NE(read_by(file, tiles, -1, {}, rows * columns, false, detail::ReadMethod::mapped)
                .verdict.find("fails the checksum written when it was saved"),
            std::string::npos);
  EXPECT_EQ(read_by(file, tiles, 0, {{0, 0, 512}}, 512 * columns, true, detail::ReadMethod::mapped)
                .verdict,
            "");
  EXPECT_NE(read_by(file, tiles, 1, {{2490, 0, 10}}, 10 * rows, true, detail::ReadMethod::mapped)
                .verdict.find("tensor 'w' is damaged"),
            std::string::npos);
  EXPECT_ERROR_MENTIONING(load_checkpoint(file), "tensor 'w' is damaged",
                          "fails the checksum written when it was saved");
  EXPECT_FALSE(verify_checkpoint(file).intact());
}

// The helper's verdict is the first damage in the order the checks were queued, more checks than
// kMaxPending go through, and a helper dropped while its checks wait for reads that never end
// stops them and returns.
TEST(TrailingSums, GivesTheFirstDamageInQueueOrderAndStopsWhenDropped) {
  using detail::TrailingSums;
  const int previous = compute_threads();
  set_compute_threads(2);
  {
    TrailingSums trailing;
    ASSERT_TRUE(trailing.active());
    std::atomic<int> running{0}, most_running{0};
    for (const char* verdict : {"", "first", "", "second", "third", "", ""}) {
      const TrailingSums::ReadDone read =
          trailing.add([&, verdict](const TrailingSums::Signals& s) {
            most_running = std::max(most_running.load(), ++running);
            while (!s.read_done.load())
              std::this_thread::yield();
            --running;
            return std::string(verdict);
          });
      read->store(true);
    }
    EXPECT_EQ(trailing.finish(), "first");
    EXPECT_EQ(most_running.load(), 1);  // one at a time, in order
    EXPECT_EQ(trailing.finish(), "");   // nothing queued since
  }
  std::atomic<int> started{0}, stopped{0};
  {
    TrailingSums trailing;
    for (int k = 0; k < 3; ++k) {
      trailing.add([&](const TrailingSums::Signals& s) {
        ++started;
        while (!s.read_done.load() && !s.stop.load())
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (s.stop.load()) ++stopped;
        return std::string("not wanted");
      });
    }
    while (started.load() == 0)
      std::this_thread::yield();
  }
  EXPECT_EQ(started.load(), 1);  // the others were dropped unstarted
  EXPECT_EQ(stopped.load(), 1);
  set_compute_threads(previous);
}

// Flips one byte of dataset `name`'s data, `at` bytes into it.
void flip_data_byte(const std::filesystem::path& file, const std::string& name,
                    const std::vector<hsize_t>& dims, std::uint64_t at) {
  const detail::StoredTiles tiles = stored_tiles(file, name, dims);
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char byte = 0;
  ASSERT_EQ(::pread(fd, &byte, 1, off_t(tiles.offset + at)), 1);
  byte = char(byte ^ 0x04);
  ASSERT_EQ(::pwrite(fd, &byte, 1, off_t(tiles.offset + at)), 1);
  ::close(fd);
}

// A load of more tensors than the helper holds at once reads them all back; with damage, it
// names the first damaged tensor in file order, whether its sums trailed its read on the helper
// or ran on the loading thread (a small tensor), with one compute thread or two.
TEST(TrailingSums, ALoadOfManyTensorsNamesTheFirstDamagedOne) {
  TempDir dir;
  CheckpointState s;
  s.iteration = 1;
  for (int k = 0; k < 9; ++k)  // 820 KiB each: their sums trail on the helper
    s.tensors["t" + std::to_string(k)] = testing::ramp({300, 700}, 0.25f, float(k));
  s.tensors["t9_small"] = testing::ramp({10, 30}, 0.5f, 1.0f);  // summed as it is read
  const auto file = save_checkpoint(dir.path(), s);
  const int previous = compute_threads();
  const auto expect_load = [&](const char* damaged) {
    for (const int threads : {1, 2}) {
      set_compute_threads(threads);
      if (!damaged) {
        const CheckpointState loaded = load_checkpoint(file);
        for (const auto& [name, tensor] : s.tensors)
          EXPECT_TRUE(bitwise_equal(loaded.tensors.at(name), tensor)) << name;
      } else {
        EXPECT_ERROR_MENTIONING(load_checkpoint(file),
                                "tensor '" + std::string(damaged) + "' is damaged",
                                "fails the checksum");
      }
    }
    set_compute_threads(previous);
  };
  expect_load(nullptr);
  flip_data_byte(file, "t9_small", {10, 30}, 17);
  expect_load("t9_small");
  flip_data_byte(file, "t6", {300, 700}, 300 * 700 * 4 - 5);  // its last tile
  expect_load("t6");
  flip_data_byte(file, "t2", {300, 700}, 1000);
  expect_load("t2");
}

// A page of a mapping that cannot be read (here: the file was cut short after it was mapped)
// ends the read with a message instead of SIGBUS; a bus error elsewhere still ends the process.
TEST(MappedRange, BusErrorsInsideAReadBecomeMessages) {
  TempDir dir;
  const auto path = dir.path() / "data";
  const std::vector<char> bytes(3 * 65536, 'x');
  {
    const int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), ssize_t(bytes.size()));
    ::close(fd);
  }
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const detail::MappedRange range(fd, 100, bytes.size() - 100,
                                  detail::MappedRange::Access::sequential);
  ASSERT_TRUE(range.valid()) << range.error();
  // Byte by byte and volatile: the count reaches exactly the last byte there is, and is not kept
  // in a register that the jump out of the read would lose.
  volatile std::size_t seen = 0;
  auto count = [&] {
    const volatile char* data = range.data();
    for (std::uint64_t i = 0; i < range.bytes(); ++i)
      seen = seen + (data[i] == 'x' ? 1 : 0);
  };
  EXPECT_EQ(detail::read_mapped(range, count), "");
  EXPECT_EQ(seen, bytes.size() - 100);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  seen = 0;
  EXPECT_NE(detail::read_mapped(range, count).find("could not be read"), std::string::npos);
  EXPECT_EQ(seen, 4096u - 100);  // up to the end of the file, then the message
  EXPECT_NE(detail::read_mapped(range, count).find("cut short"), std::string::npos);  // again
  // The child starts afresh (this process has OpenMP's threads, which fork() does not copy).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        volatile char c = range.data()[8192];
        (void)c;
      },
      "");
  ::close(fd);
}

// Rewrites an attribute of dataset `name` (deleting it, or giving it `values`).
void rewrite_attribute(const std::filesystem::path& file, const std::string& name,
                       const char* attribute, const std::vector<std::uint64_t>* values) {
  detail::Hdf5Lock lock;
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  H5Adelete(d, attribute);
  if (values) {
    const hsize_t count = values->size();
    const hid_t space = H5Screate_simple(1, &count, nullptr);
    const hid_t a = H5Acreate2(d, attribute, H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_UINT64, values->data());
    H5Aclose(a);
    H5Sclose(space);
  }
  H5Dclose(d);
  H5Fclose(f);
}

TEST(TileDigests, MissingOrDamagedChecksumAttributesAreDamage) {
  struct Case {
    const char* attribute;
    std::vector<std::uint64_t> values;  // empty: deleted
    const char* says;
  };
  const std::vector<Case> cases = {
      {"fletcher32", {}, "its checksums are missing"},
      {"fletcher32", {1, 2, 3}, "does not hold 9 checksums"},
      {"fletcher32_tile", {}, "is not a tile shape of rank 2"},
      {"fletcher32_tile", {0, 1024}, "its tile shape does not fit its shape"},
      {"fletcher32_tile", {128, 1024}, "does not hold 15 checksums"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    CheckpointState s;
    s.iteration = 1;
    s.tensors["w"] = testing::ramp({600, 2100}, 0.5f, 1.0f);
    s.tensors["v"] = testing::ramp({7}, 0.5f, 1.0f);
    const auto file = save_checkpoint(dir.path(), s);
    rewrite_attribute(file, "w", c.attribute, c.values.empty() ? nullptr : &c.values);
    EXPECT_ERROR_MENTIONING(load_checkpoint(file), "tensor 'w' is damaged", c.says);
    const CheckpointReader reader(file);
    Tensor rows = Tensor::empty({10, 2100}, DType::f32);
    EXPECT_ERROR_MENTIONING(reader.read_slice("w", 0, {{0, 0, 10}}, rows), "tensor 'w' is damaged",
                            c.says);
    Tensor v = Tensor::empty({7}, DType::f32);
    reader.read_slice("v", -1, {}, v);
    EXPECT_TRUE(bitwise_equal(s.tensors.at("v"), v));
    const VerifyReport report = verify_checkpoint(file);
    ASSERT_EQ(report.damaged.size(), 1u) << c.says;
    EXPECT_NE(report.damaged[0].find(c.says), std::string::npos) << report.damaged[0];
  }
}

}  // namespace
}  // namespace megatron::checkpoint
