// Tile digests (Note [Tile digests]): each tile's value is Fletcher32's two sums over the tile's
// bytes whatever order and cut its runs come in (so ranks' parts add up to the whole); saves store
// contiguous data with those values; slices along any dimension read back exactly and only
// check the tiles they touch; damaged or missing checksum attributes are damage.
#include <fcntl.h>
#include <hdf5.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "checkpoint/fletcher32.h"
#include "checkpoint/mapped_range.h"
#include "checkpoint/tensor_layout.h"
#include "checkpoint/tile_digests.h"
#include "checkpoint/transfer_helper.h"
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
                                 const std::vector<hsize_t>& dims, std::size_t element_bytes = 4) {
  detail::Hdf5Lock lock;
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  detail::StoredTiles tiles;
  EXPECT_EQ(detail::read_tile_attributes(d, name, dims, element_bytes, tiles), "");
  H5Dclose(d);
  H5Fclose(f);
  return tiles;
}

// With one thread or two, saves store the digests of a plain gather-and-sum, and whole loads
// (two threads: Note [Paired reads]; one: Note [Mapped reads]) and slices read back exactly.
TEST(TileDigests, OneThreadOrTwoGiveTheSameDigestsAndData) {
  const int previous = compute_threads();
  std::vector<std::vector<std::uint32_t>> digests;
  for (const int threads : {1, 2}) {
    set_compute_threads(threads);
    ASSERT_EQ(detail::TransferHelper().active(), threads == 2);
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
// the verdict. Every method but windows (the reference) is given a helper, so with two compute
// threads a whole tensor is read on both (Note [Paired reads]); with `owned`, its check may be
// deferred to the helper.
struct ReadResult {
  std::vector<float> data;
  std::string verdict;
};
ReadResult read_by(const std::filesystem::path& file, const detail::StoredTiles& tiles, int dim,
                   const std::vector<ShardRun>& runs, std::size_t elements, bool keep,
                   detail::ReadMethod method, bool cold = false, bool owned = false,
                   const std::function<void(int fd, detail::TransferHelper&)>& prepare = {}) {
  ReadResult result;
  result.data.assign(elements, -1.0f);
  const int fd = ::open(file.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  // From the disk: the file's pages dropped from the page cache (a save syncs them first).
  if (cold) {
    EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  }
  detail::TransferHelper helper;
  // What the caller does with the descriptor before the read (brings part of the file back).
  if (prepare) prepare(fd, helper);
  // `owned`: the data outlives helper.finish() below, so its check may be deferred to then.
  const std::shared_ptr<const void> owner =
      owned ? std::shared_ptr<const void>(result.data.data(), [](const void*) {}) : nullptr;
  result.verdict = detail::read_with_digests(
      fd, tiles.offset, tiles.grid, tiles.digests, keep ? result.data.data() : nullptr, dim, runs,
      "w", method, method == detail::ReadMethod::windows ? nullptr : &helper, owner);
  const std::string deferred = helper.finish();
  if (result.verdict.empty()) result.verdict = deferred;
  ::close(fd);
  return result;
}

// A checkpoint in `dir` holding one tensor "w" of [kRampRows, kRampColumns] (6.7 MiB: many
// windows), and where its data and digests are.
constexpr hsize_t kRampRows = 700, kRampColumns = 2500;
struct SavedRamp {
  CheckpointState state;
  std::filesystem::path file;
  detail::StoredTiles tiles;
};
SavedRamp save_ramp(const TempDir& dir) {
  SavedRamp saved;
  saved.state.iteration = 1;
  saved.state.tensors["w"] =
      testing::ramp({int64_t(kRampRows), int64_t(kRampColumns)}, 0.37f, -11.0f);
  saved.file = save_checkpoint(dir.path(), saved.state);
  saved.tiles = stored_tiles(saved.file, "w", {kRampRows, kRampColumns});
  return saved;
}

// Note [Mapped reads], Note [Paired reads]: reads through a mapping (one thread, slices, the
// check alone) and whole tensors read on two threads give the bytes and the verdicts of windows
// read with pread and summed in turn, for whole tensors, slices along either dimension, the
// check alone, and damage below, inside and above a selection.
TEST(TileDigests, MappedAndPairedReadsEqualWindowedReads) {
  TempDir dir;
  const hsize_t rows = kRampRows, columns = kRampColumns;
  const auto [s, file, tiles] = save_ramp(dir);
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
  // With two threads a whole tensor is read on both (paired, or read and then checked, on both or
  // deferred to the helper, or as its residency decides); with one, copied from a mapping and
  // summed in one pass.
  const int previous = compute_threads();
  const auto expect_same = [&](const char* state) {
    for (const int threads : {1, 2}) {
      set_compute_threads(threads);
      for (const Case& c : cases) {
        for (const bool keep : {true, false}) {
          const ReadResult windows =
              read_by(file, tiles, c.dim, c.runs, c.elements, keep, detail::ReadMethod::windows);
          using detail::ReadMethod;
          const std::vector<std::pair<ReadMethod, bool>> methods = {
              {ReadMethod::automatic, true},
              {ReadMethod::paired, false},
              {ReadMethod::read_then_check, true},
              {ReadMethod::read_then_check, false},
              {ReadMethod::ring, true},
              {ReadMethod::ring, false}};
          for (const auto& [method, owned] : methods) {
            for (const bool cold : {false, true}) {
              const ReadResult r =
                  read_by(file, tiles, c.dim, c.runs, c.elements, keep, method, cold, owned);
              const auto where = ::testing::Message()
                                 << state << ", dim " << c.dim << ", " << threads
                                 << " threads, method " << int(method) << ", owned " << owned
                                 << ", cold " << cold;
              EXPECT_EQ(r.verdict, windows.verdict) << where;
              EXPECT_EQ(std::memcmp(r.data.data(), windows.data.data(), c.elements * 4), 0)
                  << where;
            }
          }
        }
      }
    }
    set_compute_threads(previous);
  };
  expect_same("intact");
  const ReadResult all =
      read_by(file, tiles, -1, {}, rows * columns, true, detail::ReadMethod::automatic);
  EXPECT_EQ(all.verdict, "");
  EXPECT_EQ(std::memcmp(all.data.data(), whole.data(), whole.size() * 4), 0);
  const ReadResult first_rows =
      read_by(file, tiles, 0, {{0, 0, 512}}, 512 * columns, true, detail::ReadMethod::automatic);
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
  EXPECT_NE(read_by(file, tiles, -1, {}, rows * columns, false, detail::ReadMethod::automatic)
                .verdict.find("fails the checksum written when it was saved"),
            std::string::npos);
  EXPECT_EQ(
      read_by(file, tiles, 0, {{0, 0, 512}}, 512 * columns, true, detail::ReadMethod::automatic)
          .verdict,
      "");
  EXPECT_NE(read_by(file, tiles, 1, {{2490, 0, 10}}, 10 * rows, true, detail::ReadMethod::automatic)
                .verdict.find("tensor 'w' is damaged"),
            std::string::npos);
  EXPECT_ERROR_MENTIONING(load_checkpoint(file), "tensor 'w' is damaged",
                          "fails the checksum written when it was saved");
  EXPECT_FALSE(verify_checkpoint(file).intact());
}

// Note [Mapped reads]: with one compute thread a whole tensor whose end is not in the page cache
// is read window by window, those the page cache holds through a mapping and the others by pread.
// With the tensor's first half in the page cache and the rest not (read-ahead off for the
// descriptor, so a pread brings in only what it asks for), the bytes and verdicts are those of
// windows read in turn: intact, and with a byte changed in either half.
TEST(TileDigests, OneThreadTakesWindowsInThePageCacheFromAMapping) {
  TempDir dir;
  const hsize_t rows = kRampRows, columns = kRampColumns;
  const auto [s, file, tiles] = save_ramp(dir);
  const std::size_t bytes = rows * columns * 4;
  const int previous = compute_threads();
  set_compute_threads(1);
  const auto read_half_cached = [&](const char* state) {
    const auto first_half_in_cache = [&](int fd, detail::TransferHelper& helper) {
      EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);
      std::vector<char> first_half(bytes / 2);
      // Read again should the page cache drop a page of it meanwhile (other tests running beside
      // this one once made it so).
      for (int attempt = 0; attempt < 5 && !helper.in_page_cache(fd, tiles.offset, bytes / 2);
           ++attempt) {
        EXPECT_EQ(::pread(fd, first_half.data(), first_half.size(), off_t(tiles.offset)),
                  ssize_t(first_half.size()));
      }
      EXPECT_TRUE(helper.in_page_cache(fd, tiles.offset, bytes / 2)) << state;
      for (std::size_t at = bytes / 2 + 4096; at + 4096 <= bytes; at += 4096)
        EXPECT_FALSE(helper.in_page_cache(fd, tiles.offset + at, 4096)) << state << ", byte " << at;
    };
    return read_by(file, tiles, -1, {}, rows * columns, true, detail::ReadMethod::automatic, true,
                   false, first_half_in_cache);
  };
  const auto expect_windows_verdict = [&](const char* state) {
    const ReadResult windows =
        read_by(file, tiles, -1, {}, rows * columns, true, detail::ReadMethod::windows);
    const ReadResult r = read_half_cached(state);
    EXPECT_EQ(r.verdict, windows.verdict) << state;
    EXPECT_EQ(std::memcmp(r.data.data(), windows.data.data(), bytes), 0) << state;
    return r.verdict;
  };
  EXPECT_EQ(expect_windows_verdict("intact"), "");
  EXPECT_TRUE(bitwise_equal(
      Tensor::from(read_half_cached("intact").data, {int64_t(rows), int64_t(columns)}),
      s.tensors.at("w")));
  // A byte changed in a window the page cache holds (row 10), then in one read from the disk
  // (the last row), each synced so the page cache can drop it.
  for (const std::size_t at : {std::size_t(10 * columns * 4 + 5), bytes - 3}) {
    const int fd = ::open(file.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char byte = 0;
    ASSERT_EQ(::pread(fd, &byte, 1, off_t(tiles.offset + at)), 1);
    const char changed = char(byte ^ 0x10);
    ASSERT_EQ(::pwrite(fd, &changed, 1, off_t(tiles.offset + at)), 1);
    ASSERT_EQ(::fsync(fd), 0);
    const std::string verdict =
        expect_windows_verdict(at < bytes / 2 ? "cached half" : "disk half");
    EXPECT_NE(verdict.find("fails the checksum written when it was saved"), std::string::npos)
        << verdict;
    ASSERT_EQ(::pwrite(fd, &byte, 1, off_t(tiles.offset + at)), 1);
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  set_compute_threads(previous);
}

// The helper runs a task beside the calling thread and returns once both parts are done; what
// either part throws reaches the caller, only after the other part has finished; the helper's
// part is dropped when the caller's is done before the helper is free; with one compute thread
// the calling thread runs its part alone.
TEST(TransferHelper, RunsATaskOnBothThreadsAndRethrows) {
  using detail::TransferHelper;
  const int previous = compute_threads();
  set_compute_threads(2);
  {
    TransferHelper helper;
    ASSERT_TRUE(helper.active());
    for (int round = 0; round < 3; ++round) {  // the same helper, task after task
      std::array<std::thread::id, 2> ran{};
      std::atomic<int> calls{0};
      helper.run_on_both([&](int worker) {
        ran[std::size_t(worker)] = std::this_thread::get_id();
        ++calls;
        // The caller's part waits for the helper's to start (else it would be dropped).
        while (worker == 0 && calls.load() < 2)
          std::this_thread::yield();
      });
      EXPECT_EQ(calls.load(), 2);
      EXPECT_EQ(ran[0], std::this_thread::get_id());
      EXPECT_NE(ran[1], std::thread::id());
      EXPECT_NE(ran[1], ran[0]);
    }
    std::atomic<bool> helper_started{false}, helper_done{false};
    EXPECT_ERROR_MENTIONING(helper.run_on_both([&](int worker) {
      if (worker == 0) {
        while (!helper_started.load())
          std::this_thread::yield();
        throw Error("the caller's part failed");
      }
      helper_started = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      helper_done = true;
    }),
                            "the caller's part failed");
    EXPECT_TRUE(helper_done.load());  // the caller waited for the helper's part
    helper_started = false;
    EXPECT_ERROR_MENTIONING(helper.run_on_both([&](int worker) {
      if (worker == 0) {
        while (!helper_started.load())
          std::this_thread::yield();
        return;
      }
      helper_started = true;
      throw Error("the helper's part failed");
    }),
                            "the helper's part failed");
    std::atomic<int> calls{0};
    helper.run_on_both([&](int worker) {  // still usable after a failure
      ++calls;
      while (worker == 0 && calls.load() < 2)
        std::this_thread::yield();
    });
    EXPECT_EQ(calls.load(), 2);

    // Behind work deferred before, the helper's part is dropped once the caller's is done: the
    // caller does not wait for that work.
    std::atomic<bool> deferred_done{false};
    class SlowWork : public detail::SharedWork {
     public:
      explicit SlowWork(std::atomic<bool>& done) : done_(done) {}
      void take_part(int worker) noexcept override {
        if (worker != 1) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        done_ = true;
      }
      std::string verdict() override { return ""; }

     private:
      std::atomic<bool>& done_;
    };
    helper.defer(std::make_shared<SlowWork>(deferred_done));
    std::vector<int> workers;
    helper.run_on_both([&](int worker) { workers.push_back(worker); });
    EXPECT_EQ(workers, std::vector<int>{0});
    EXPECT_FALSE(deferred_done.load());
    EXPECT_EQ(helper.finish(), "");
    EXPECT_TRUE(deferred_done.load());
  }
  set_compute_threads(1);
  {
    TransferHelper helper;
    EXPECT_FALSE(helper.active());
    std::vector<int> workers;
    helper.run_on_both([&](int worker) { workers.push_back(worker); });
    EXPECT_EQ(workers, std::vector<int>{0});
  }
  set_compute_threads(previous);
}

// A deferred check for the helper's tests: notes which threads took part, sleeping a little
// first (so the caller of finish() finds it running), and gives a set verdict.
class NotedCheck : public detail::SharedWork {
 public:
  NotedCheck(std::string verdict, std::function<void(const std::string&)> note)
      : verdict_(std::move(verdict)), note_(std::move(note)) {}
  void take_part(int worker) noexcept override {
    if (worker == 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    workers_[std::size_t(worker)] = std::this_thread::get_id();
    note_("check " + verdict_ + " by " + std::to_string(worker));
  }
  std::string verdict() override { return verdict_; }
  std::array<std::thread::id, 2> workers_{};

 private:
  std::string verdict_;
  std::function<void(const std::string&)> note_;
};

// Checks deferred to the helper run there in order, before what is queued after them; finish()
// takes part in each itself, waits for the helper's parts and gives the first damage in order.
// A helper dropped with checks queued runs none of those not started. Without the helper (one
// compute thread, or inside a parallel region) a deferred check runs at once, on the calling
// thread.
TEST(TransferHelper, DeferredChecksGiveTheFirstDamageInOrder) {
  using detail::TransferHelper;
  const int previous = compute_threads();
  set_compute_threads(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mutex;
  std::vector<std::string> order;
  const auto note = [&](const std::string& what) {
    std::lock_guard lock(mutex);
    order.push_back(what);
  };
  {
    TransferHelper helper;
    std::vector<std::shared_ptr<NotedCheck>> checks;
    for (const char* verdict : {"", "first", "", "second"}) {
      checks.push_back(std::make_shared<NotedCheck>(verdict, note));
      helper.defer(checks.back());
    }
    std::atomic<bool> helper_started{false};
    helper.run_on_both([&](int worker) {
      if (worker == 1) {
        note("helper's part");
        helper_started = true;
      }
      while (!helper_started.load())  // the caller's part waits, so the helper's is not dropped
        std::this_thread::yield();
    });
    std::vector<std::string> by_helper;
    for (const std::string& o : order)
      if (o.ends_with("by 1") || o == "helper's part") by_helper.push_back(o);
    EXPECT_EQ(by_helper, (std::vector<std::string>{"check  by 1", "check first by 1", "check  by 1",
                                                   "check second by 1", "helper's part"}));
    EXPECT_EQ(helper.finish(), "first");
    for (const auto& check : checks) {
      EXPECT_EQ(check->workers_[0], caller);  // finish() took part in each
      EXPECT_NE(check->workers_[1], caller);
      EXPECT_NE(check->workers_[1], std::thread::id());
    }
    EXPECT_EQ(helper.finish(), "");  // nothing deferred since
  }
  std::atomic<int> started{0};
  {
    TransferHelper helper;
    for (int k = 0; k < 3; ++k)
      helper.defer(std::make_shared<NotedCheck>("not wanted", [&](const std::string&) {
        ++started;
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
      }));
    while (started.load() == 0)
      std::this_thread::yield();
  }
  EXPECT_EQ(started.load(), 1);  // the others were dropped unstarted
  set_compute_threads(1);
  {
    TransferHelper helper;  // one compute thread: no helper thread
    EXPECT_FALSE(helper.active());
    const auto check = std::make_shared<NotedCheck>("at once", note);
    helper.defer(check);
    EXPECT_EQ(check->workers_[0], caller);  // ran on the calling thread, before defer returned
    EXPECT_EQ(check->workers_[1], std::thread::id());
    EXPECT_EQ(helper.finish(), "at once");
  }
  {
    // Work deferred one step behind (Note [Ring reads]) runs on the calling thread at the next
    // defer_behind or in finish(); its verdict keeps its place among the others'.
    TransferHelper helper;
    order.clear();
    const auto first = std::make_shared<NotedCheck>("first", note);
    const auto second = std::make_shared<NotedCheck>("second", note);
    const auto third = std::make_shared<NotedCheck>("", note);
    helper.defer_behind(first);
    EXPECT_TRUE(order.empty());
    helper.defer(second);  // at once
    helper.defer_behind(third);
    EXPECT_EQ(order, (std::vector<std::string>{"check second by 0", "check first by 0"}));
    EXPECT_EQ(helper.finish(), "first");
    EXPECT_EQ(order.back(), "check  by 0");
    EXPECT_EQ(third->workers_[0], caller);
    EXPECT_EQ(helper.finish(), "");
  }
  set_compute_threads(2);
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
      TransferHelper helper;  // inside a parallel region: no helper thread
      EXPECT_FALSE(helper.active());
      const auto check = std::make_shared<NotedCheck>("at once", note);
      helper.defer(check);
      EXPECT_EQ(check->workers_[0], std::this_thread::get_id());
      EXPECT_EQ(check->workers_[1], std::thread::id());
      EXPECT_EQ(helper.finish(), "at once");
    }
  }
  set_compute_threads(previous);
}

// A whole tensor read by any method (on two threads: paired or read then checked; through the
// ring) from a file cut short inside its data says that it cannot be read back, and never that it
// is intact.
TEST(TileDigests, AFileCutShortCannotBeReadBack) {
  TempDir dir;
  const hsize_t rows = kRampRows, columns = kRampColumns;
  const auto [s, file, tiles] = save_ramp(dir);
  std::filesystem::resize_file(file, tiles.offset + rows * columns * 2);  // half of it
  const int previous = compute_threads();
  for (const int threads : {1, 2}) {
    set_compute_threads(threads);
    for (const auto method :
         {detail::ReadMethod::automatic, detail::ReadMethod::windows, detail::ReadMethod::paired,
          detail::ReadMethod::read_then_check, detail::ReadMethod::ring}) {
      const ReadResult r = read_by(file, tiles, -1, {}, rows * columns, true, method, false, true);
      EXPECT_NE(r.verdict.find("tensor 'w' is damaged: its data cannot be read back"),
                std::string::npos)
          << r.verdict << " (" << threads << " threads, method " << int(method) << ")";
    }
  }
  set_compute_threads(previous);
}

// Flips one byte of dataset `name`'s data, `at` bytes into it.
void flip_data_byte(const std::filesystem::path& file, const std::string& name,
                    const std::vector<hsize_t>& dims, std::uint64_t at,
                    std::size_t element_bytes = 4) {
  const detail::StoredTiles tiles = stored_tiles(file, name, dims, element_bytes);
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char byte = 0;
  ASSERT_EQ(::pread(fd, &byte, 1, off_t(tiles.offset + at)), 1);
  byte = char(byte ^ 0x04);
  ASSERT_EQ(::pwrite(fd, &byte, 1, off_t(tiles.offset + at)), 1);
  ::close(fd);
}

// A load of many tensors reads them all back; with damage, it names the first damaged tensor in
// file order, whether it was read on both threads, checked on the helper after its read (from
// the disk), read through the ring and checked one step behind, or read on the loading thread
// alone (a small tensor), with one compute thread or two.
TEST(TileDigests, ALoadOfManyTensorsNamesTheFirstDamagedOne) {
  TempDir dir;
  CheckpointState s;
  s.iteration = 1;
  for (int k = 0; k < 9; ++k)  // 1.2 MiB each: read on both threads
    s.tensors["t" + std::to_string(k)] = testing::ramp({300, 1000}, 0.25f, float(k));
  s.tensors["t9_small"] = testing::ramp({10, 30}, 0.5f, 1.0f);  // read on one thread
  const auto file = save_checkpoint(dir.path(), s);
  const int previous = compute_threads();
  const auto expect_load = [&](const char* damaged) {
    for (const int threads : {1, 2}) {
      // Loads choose; with two threads, every large tensor read on both threads, or read and
      // then checked on the helper while the next is read (as loads from the disk do).
      // With "ring", through the ring, each check one step behind.
      for (const char* method : {"", "paired", "read_then_check", "ring"}) {
        set_compute_threads(threads);
        if (*method) setenv("MEGATRON_TEST_WHOLE_READS", method, 1);
        SCOPED_TRACE(::testing::Message() << threads << " threads, method '" << method << "'");
        if (!damaged) {
          const CheckpointState loaded = load_checkpoint(file);
          for (const auto& [name, tensor] : s.tensors)
            EXPECT_TRUE(bitwise_equal(loaded.tensors.at(name), tensor)) << name;
        } else {
          EXPECT_ERROR_MENTIONING(load_checkpoint(file),
                                  "tensor '" + std::string(damaged) + "' is damaged",
                                  "fails the checksum");
        }
        unsetenv("MEGATRON_TEST_WHOLE_READS");
      }
    }
    set_compute_threads(previous);
  };
  expect_load(nullptr);
  flip_data_byte(file, "t6", {300, 1000}, 300 * 1000 * 4 - 5);  // its last tile
  expect_load("t6");
  flip_data_byte(file, "t9_small", {10, 30}, 17);  // found first, named second
  expect_load("t6");
  flip_data_byte(file, "t2", {300, 1000}, 1000);
  expect_load("t2");
}

// Note [Paired reads]: a whole tensor's windows, computed from its shape, cover every byte once
// whatever the shape (1-D, 3-D, 8-byte elements, lines merged into runs or cut into tile
// columns, tile rows that end inside a window): a save on two threads stores the digests summed
// tile by tile from the gathered bytes, and every way of reading it whole reads it back and
// finds a changed byte anywhere in it.
TEST(TileDigests, WholeTensorsOfAnyShapeAreSummedAndCheckedInWindows) {
  struct Shaped {
    const char* name;
    Tensor tensor;
    std::uint64_t damage_at;  // a byte inside it, away from both ends
  };
  std::vector<double> wide(130 * 5000);
  for (std::size_t i = 0; i < wide.size(); ++i)
    wide[i] = double((i * 2654435761u) % 100003) * 0.01 - 500.0;
  std::vector<Shaped> shaped;
  shaped.push_back({"flat", Tensor::from(values(700000), {700000}), 1234567});
  shaped.push_back({"cube", Tensor::from(values(2 * 2049 * 600), {2, 2049, 600}), 6000001});
  // Tiles of [1, 349, 750]: a tile's lines end inside a window of 174 lines.
  shaped.push_back({"slab", Tensor::from(values(2 * 1500 * 750), {2, 1500, 750}), 5000001});
  shaped.push_back(
      {"tall", Tensor::from(std::vector<double>(wide.begin(), wide.end()), {5000, 130}), 3333333});
  shaped.push_back({"wide", Tensor::from(wide, {130, 5000}), 2500003});
  CheckpointState s;
  s.iteration = 1;
  for (const Shaped& t : shaped)
    s.tensors[t.name] = t.tensor;
  TempDir dir;
  const int previous = compute_threads();
  set_compute_threads(2);
  const auto file = save_checkpoint(dir.path(), s);
  for (const Shaped& t : shaped) {
    const std::vector<hsize_t> dims(t.tensor.shape().begin(), t.tensor.shape().end());
    const detail::StoredTiles tiles = stored_tiles(file, t.name, dims, t.tensor.element_size());
    EXPECT_EQ(tiles.digests,
              gathered_digests(tiles.grid, static_cast<const char*>(t.tensor.raw_data())))
        << t.name;
  }
  const auto expect_load = [&](const std::string& damaged) {
    for (const int threads : {1, 2}) {
      set_compute_threads(threads);
      for (const char* method : {"", "paired", "read_then_check", "ring"}) {
        if (*method) setenv("MEGATRON_TEST_WHOLE_READS", method, 1);
        SCOPED_TRACE(::testing::Message() << threads << " threads, method '" << method << "'");
        if (damaged.empty()) {
          const CheckpointState loaded = load_checkpoint(file);
          for (const auto& [name, tensor] : s.tensors)
            EXPECT_TRUE(bitwise_equal(loaded.tensors.at(name), tensor)) << name;
        } else {
          EXPECT_ERROR_MENTIONING(load_checkpoint(file), "tensor '" + damaged + "' is damaged",
                                  "fails the checksum");
        }
        unsetenv("MEGATRON_TEST_WHOLE_READS");
      }
    }
  };
  expect_load("");
  // Damaged one at a time, each restored before the next (loads name the first in file order).
  for (const Shaped& t : shaped) {
    const std::vector<hsize_t> dims(t.tensor.shape().begin(), t.tensor.shape().end());
    flip_data_byte(file, t.name, dims, t.damage_at, t.tensor.element_size());
    expect_load(t.name);
    flip_data_byte(file, t.name, dims, t.damage_at, t.tensor.element_size());
  }
  expect_load("");
  set_compute_threads(previous);
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
