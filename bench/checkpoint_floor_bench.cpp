// What any checkpoint format pays on this machine, measured on plain files without HDF5: moving
// the same bytes as one contiguous run per tensor or as the checkpoint's chunk tiles (1 MiB tiles
// of 256 rows x 4 KiB, cut from rows of 16 KiB: a [h, 4h] f32 weight at h = 1024), and checking
// every loaded byte once, by Fletcher32 or by the cheapest check there is (a 64-bit sum), right
// after each 256 KiB window is read, while it is in the core's cache. The gap between
// read_contiguous and read_contiguous_sum is the least a load that verifies every byte can add
// when the kernel, not the loader, copies the data out of the page cache. RESULTS.md.
//   checkpoint_floor_bench --benchmark_min_time=1   (MEGATRON_BENCH_DIR: where the file goes)
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "checkpoint/fletcher32.h"

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kWindow = std::size_t(256) << 10;
constexpr std::size_t kChunk = std::size_t(1) << 20;
constexpr std::size_t kRowBytes = std::size_t(16) << 10;
constexpr std::size_t kPieceBytes = std::size_t(4) << 10;
constexpr std::size_t kTileRows = kChunk / kPieceBytes;

fs::path bench_file() {
  const char* base = std::getenv("MEGATRON_BENCH_DIR");
  return fs::path(base ? base : fs::temp_directory_path().string()) /
         "megatron_checkpoint_floor_bench.bin";
}

void fail(const char* what) {
  std::perror(what);
  std::exit(1);
}

struct Aligned {
  explicit Aligned(std::size_t bytes)
      : data(static_cast<char*>(std::aligned_alloc(4096, bytes)), std::free) {
    if (!data) fail("aligned_alloc");
    std::memset(data.get(), 0x5a, bytes);  // touched, so no timed loop takes page faults
  }
  std::unique_ptr<char, void (*)(void*)> data;
};

// The cheapest check of every byte: their sum as 64-bit words (bytes is a multiple of 64).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) std::uint64_t
word_sum(const char* data, std::size_t bytes) {
  std::uint64_t lanes[8] = {};
  for (std::size_t at = 0; at < bytes; at += 64) {
    std::uint64_t words[8];
    std::memcpy(words, data + at, 64);
    for (int i = 0; i < 8; ++i)
      lanes[i] += words[i];
  }
  std::uint64_t sum = 0;
  for (const std::uint64_t lane : lanes)
    sum += lane;
  return sum;
}

// The iovecs of chunk `c` (row-major over a grid of tiles) in a tensor of rows of kRowBytes:
// kTileRows pieces of kPieceBytes, one per row.
std::vector<iovec> tile_pieces(char* tensor, std::size_t c) {
  const std::size_t tiles_per_row = kRowBytes / kPieceBytes;
  const std::size_t first_row = (c / tiles_per_row) * kTileRows;
  const std::size_t column = (c % tiles_per_row) * kPieceBytes;
  std::vector<iovec> iov(kTileRows);
  for (std::size_t r = 0; r < kTileRows; ++r)
    iov[r] = {tensor + (first_row + r) * kRowBytes + column, kPieceBytes};
  return iov;
}

enum class Check { none, sum, fletcher32 };
enum class Layout { contiguous, tiles };

// The pieces of chunk `c` of a tensor in `layout`, cut into windows of kWindow bytes.
std::vector<std::vector<iovec>> chunk_windows(char* tensor, std::size_t c, Layout layout) {
  std::vector<iovec> pieces = layout == Layout::tiles
                                  ? tile_pieces(tensor, c)
                                  : std::vector<iovec>{{tensor + c * kChunk, kChunk}};
  std::vector<std::vector<iovec>> windows(kChunk / kWindow);
  std::size_t at = 0;
  for (const iovec& piece : pieces) {
    for (std::size_t done = 0; done < piece.iov_len;) {
      const std::size_t take = std::min(piece.iov_len - done, kWindow - at % kWindow);
      windows[at / kWindow].push_back({static_cast<char*>(piece.iov_base) + done, take});
      done += take;
      at += take;
    }
  }
  return windows;
}

std::uint64_t check_window(const std::vector<iovec>& window, Check check) {
  if (check == Check::none) return 0;
  if (check == Check::sum) {
    std::uint64_t sum = 0;
    for (const iovec& piece : window)
      sum += word_sum(static_cast<const char*>(piece.iov_base), piece.iov_len);
    return sum;
  }
  megatron::checkpoint::detail::Fletcher32 sum;
  for (const iovec& piece : window)
    sum.add(piece.iov_base, piece.iov_len);
  return sum.value();
}

// Reads a page-cached file of range(0) MiB into one buffer (the tensor), in 256 KiB windows,
// each checked right after it is read; with Layout::tiles each window lands in 4 KiB pieces of
// the tensor's rows, as a chunk tile does.
void Read(benchmark::State& state, Layout layout, Check check) {
  const std::size_t bytes = std::size_t(state.range(0)) << 20;
  Aligned tensor(bytes);
  const fs::path path = bench_file();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ::pwrite(fd, tensor.data.get(), bytes, 0) != ssize_t(bytes)) fail("write");
  std::vector<std::vector<std::vector<iovec>>> plan;
  for (std::size_t c = 0; c < bytes / kChunk; ++c)
    plan.push_back(chunk_windows(tensor.data.get(), c, layout));
  std::uint64_t checked = 0;
  for (auto _ : state) {
    std::size_t offset = 0;
    for (const auto& windows : plan) {
      for (const std::vector<iovec>& window : windows) {
        if (::preadv(fd, window.data(), int(window.size()), off_t(offset)) != ssize_t(kWindow))
          fail("preadv");
        checked += check_window(window, check);
        offset += kWindow;
      }
    }
  }
  benchmark::DoNotOptimize(checked);
  state.SetBytesProcessed(std::int64_t(state.iterations() * bytes));
  ::close(fd);
  fs::remove(path);
}

enum class Write { contiguous, tiles_gathered, tiles_scattered };

// Writes range(0) MiB to a new file in 1 MiB chunks (no fsync: the copy into the page cache is
// what differs): each chunk straight from the tensor, or a tile gathered into a buffer first (as
// a save does for H5Dwrite_chunk), or a tile's 4 KiB pieces given to one pwritev.
void WriteChunks(benchmark::State& state, Write how) {
  const std::size_t bytes = std::size_t(state.range(0)) << 20;
  Aligned tensor(bytes);
  Aligned buffer(kChunk);
  const fs::path path = bench_file();
  for (auto _ : state) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail("open");
    for (std::size_t c = 0; c < bytes / kChunk; ++c) {
      const off_t offset = off_t(c * kChunk);
      ssize_t wrote = 0;
      if (how == Write::contiguous) {
        wrote = ::pwrite(fd, tensor.data.get() + c * kChunk, kChunk, offset);
      } else {
        const std::vector<iovec> pieces = tile_pieces(tensor.data.get(), c);
        if (how == Write::tiles_scattered) {
          wrote = ::pwritev(fd, pieces.data(), int(pieces.size()), offset);
        } else {
          for (std::size_t p = 0; p < pieces.size(); ++p)
            std::memcpy(buffer.data.get() + p * kPieceBytes, pieces[p].iov_base, kPieceBytes);
          wrote = ::pwrite(fd, buffer.data.get(), kChunk, offset);
        }
      }
      if (wrote != ssize_t(kChunk)) fail("write");
    }
    ::close(fd);
  }
  state.SetBytesProcessed(std::int64_t(state.iterations() * bytes));
  fs::remove(path);
}

#define MEGATRON_FLOOR_BENCH(function, name, ...) \
  BENCHMARK_CAPTURE(function, name, __VA_ARGS__)  \
      ->Arg(64)                                   \
      ->Arg(512)                                  \
      ->Unit(benchmark::kMillisecond)             \
      ->UseRealTime()

MEGATRON_FLOOR_BENCH(Read, contiguous, Layout::contiguous, Check::none);
MEGATRON_FLOOR_BENCH(Read, contiguous_sum, Layout::contiguous, Check::sum);
MEGATRON_FLOOR_BENCH(Read, contiguous_fletcher32, Layout::contiguous, Check::fletcher32);
MEGATRON_FLOOR_BENCH(Read, tiles, Layout::tiles, Check::none);
MEGATRON_FLOOR_BENCH(Read, tiles_fletcher32, Layout::tiles, Check::fletcher32);
MEGATRON_FLOOR_BENCH(WriteChunks, contiguous, Write::contiguous);
MEGATRON_FLOOR_BENCH(WriteChunks, tiles_gathered, Write::tiles_gathered);
MEGATRON_FLOOR_BENCH(WriteChunks, tiles_scattered, Write::tiles_scattered);

}  // namespace

BENCHMARK_MAIN();
