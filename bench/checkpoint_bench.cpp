// Checkpoint save and load time with checksums (the format: contiguous data with a Fletcher32
// checksum per tile in attributes, Note [Tile digests]), against format_version 1's chunk tiles
// through HDF5's Fletcher32 filter, the same chunks without the filter, and the tensors stored
// contiguously without checksums (the format before them), on one process: save = create,
// write, close, fsync, rename, marker; load = every tensor read. The
// tensors are GPT-shaped f32 weights of about `range(0)` MiB in all. Loads read a file the save
// just wrote, so they come from the page cache (the checksum's share is the largest it can be),
// and, as "_cold", after the file's pages were dropped from the cache (a resume after a restart).
// Results are recorded in RESULTS.md.
//   checkpoint_bench --benchmark_min_time=1 [--benchmark_filter=...]   (MEGATRON_BENCH_DIR: where)
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/hdf5_util.h"
#include "checkpoint/tensor_io.h"
#include "checkpoint/tensor_layout.h"
#include "megatron/checkpoint/checkpoint.h"

namespace {

using namespace megatron;
using checkpoint::detail::Handle;
namespace fs = std::filesystem;

fs::path bench_dir(const std::string& name) {
  const char* base = std::getenv("MEGATRON_BENCH_DIR");
  const fs::path dir = fs::path(base ? base : fs::temp_directory_path().string()) /
                       ("megatron_checkpoint_bench_" + name);
  fs::create_directories(dir);
  return dir;
}

// Layers of [3h, h] + [h, h] + [4h, h] + [h, 4h] weights (h = 1024) until about `mib` MiB.
checkpoint::CheckpointState gpt_like_state(std::int64_t mib) {
  constexpr std::int64_t h = 1024;
  checkpoint::CheckpointState s;
  s.iteration = 1;
  const std::vector<Shape> layer = {{3 * h, h}, {h, h}, {4 * h, h}, {h, 4 * h}};
  std::int64_t bytes = 0;
  for (int l = 0; bytes < mib << 20; ++l) {
    for (std::size_t i = 0; i < layer.size(); ++i) {
      std::vector<float> values(static_cast<std::size_t>(shape_numel(layer[i])));
      for (std::size_t k = 0; k < values.size(); ++k)
        values[k] = static_cast<float>((k * 2654435761u + std::size_t(l)) % 1000) * 1e-3f - 0.5f;
      s.tensors["model/layers." + std::to_string(l) + ".w" + std::to_string(i)] =
          Tensor::from(values, layer[i]);
      bytes += static_cast<std::int64_t>(values.size() * 4);
    }
  }
  return s;
}

// What is timed: the format (save_checkpoint, load_checkpoint), format_version 1's chunk tiles
// going through HDF5's own Fletcher32 filter, the same chunks without the filter ("chunked": what
// that layout alone cost), or the format before checksums (contiguous datasets, no checksums).
// "plain_twin" is the last again, in a directory of its own: against "plain" it is an A/A
// comparison, what two files of the same format and code differ by (a cold load's time depends
// on where its file lies: bench/RESULTS.md, "The bench's own spread").
enum class Format { checksummed, hdf5_filter, chunked, plain, plain_twin };

const char* format_dir(Format format) {
  return format == Format::checksummed   ? "checksummed"
         : format == Format::hdf5_filter ? "hdf5_filter"
         : format == Format::chunked     ? "chunked"
         : format == Format::plain       ? "plain"
                                         : "plain_twin";
}

// A checkpoint written by hand with the same crash-safe file steps: checksummed chunks through
// HDF5's filter, the same chunks without checksums, or contiguous datasets without checksums.
void save_by_hand(const fs::path& dir, const checkpoint::CheckpointState& s, Format format) {
  const fs::path file = checkpoint::checkpoint_file(dir, s.iteration);
  const fs::path partial = file.string() + ".partial";
  {
    checkpoint::detail::Hdf5Lock lock;
    Handle fapl = checkpoint::detail::file_access_properties();
    Handle f(H5Fcreate(partial.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    checkpoint::detail::write_state_attributes(f.get(), s);
    // Format version 1: its tensors are chunks (with or without the filter) or, before
    // checksums, contiguous without any (version 2 files must carry tile digests).
    H5Adelete(f.get(), "format_version");
    checkpoint::detail::write_int_attribute(f.get(), "format_version", 1);
    Handle links(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_create_intermediate_group(links.get(), 1);
    for (const auto& [name, t] : s.tensors) {
      std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
      Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
      Handle dcpl = format == Format::plain || format == Format::plain_twin
                        ? Handle(H5Pcreate(H5P_DATASET_CREATE), H5Pclose)
                        : checkpoint::detail::chunked_creation_properties(dims, 4);
      if (format == Format::chunked) H5Premove_filter(dcpl.get(), H5Z_FILTER_FLETCHER32);
      Handle d(H5Dcreate2(f.get(), name.c_str(), H5T_IEEE_F32LE, space.get(), links.get(),
                          dcpl.get(), H5P_DEFAULT),
               H5Dclose);
      H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data());
    }
  }
  checkpoint::detail::durable_rename(partial, file);
  checkpoint::detail::write_latest_marker(dir, s.iteration);
}

void save(Format format, const fs::path& dir, const checkpoint::CheckpointState& s) {
  if (format == Format::checksummed) {
    checkpoint::save_checkpoint(dir, s);
  } else {
    save_by_hand(dir, s, format);
  }
}

// Every tensor read with H5Dread, HDF5's filter checking each chunk, into tensors allocated as
// load_checkpoint allocates them.
std::vector<Tensor> load_through_hdf5(const fs::path& file, const checkpoint::CheckpointState& s) {
  checkpoint::detail::Hdf5Lock lock;
  Handle fapl = checkpoint::detail::file_access_properties();
  Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  std::vector<Tensor> out;
  for (const auto& [name, t] : s.tensors) {
    Handle d(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
    out.push_back(Tensor::empty(t.shape(), DType::f32));
    if (H5Dread(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.back().raw_data()) <
        0)
      std::exit(1);
  }
  return out;
}

void Save(benchmark::State& state, Format format) {
  const auto s = gpt_like_state(state.range(0));
  const fs::path dir = bench_dir(format_dir(format));
  for (auto _ : state)
    save(format, dir, s);
  state.SetBytesProcessed(state.iterations() * (state.range(0) << 20));
  fs::remove_all(dir);
}

// Drops the file's pages from the page cache (they are clean: the save fsynced them), so the
// next read comes from the disk.
void evict(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0 || ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) {
    std::perror(file.c_str());
    std::exit(1);
  }
  ::close(fd);
}

// CPU time of the calling thread alone, in ms (a load's own thread; the helper's is the rest
// of the process CPU time).
double thread_cpu_ms() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-3;
}

void Load(benchmark::State& state, Format format, bool cold) {
  const auto s = gpt_like_state(state.range(0));
  const fs::path dir = bench_dir(std::string(format_dir(format)) + "_load");
  save(format, dir, s);
  const fs::path file = checkpoint::checkpoint_file(dir, s.iteration);
  double loading_thread_ms = 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      evict(file);
      state.ResumeTiming();
    }
    const double cpu_before = thread_cpu_ms();
    if (format == Format::hdf5_filter || format == Format::chunked) {
      benchmark::DoNotOptimize(load_through_hdf5(file, s));
    } else {
      benchmark::DoNotOptimize(checkpoint::load_checkpoint(file));
    }
    loading_thread_ms += thread_cpu_ms() - cpu_before;
  }
  state.counters["loading_thread_cpu_ms"] =
      benchmark::Counter(loading_thread_ms / double(state.iterations()));
  state.SetBytesProcessed(state.iterations() * (state.range(0) << 20));
  fs::remove_all(dir);
}

#define MEGATRON_CHECKPOINT_BENCH(function, name, ...) \
  BENCHMARK_CAPTURE(function, name, __VA_ARGS__)       \
      ->Arg(64)                                        \
      ->Arg(512)                                       \
      ->Unit(benchmark::kMillisecond)                  \
      ->MeasureProcessCPUTime()                        \
      ->UseRealTime()

MEGATRON_CHECKPOINT_BENCH(Save, checksummed, Format::checksummed);
MEGATRON_CHECKPOINT_BENCH(Save, hdf5_filter, Format::hdf5_filter);
MEGATRON_CHECKPOINT_BENCH(Save, chunked, Format::chunked);
MEGATRON_CHECKPOINT_BENCH(Save, plain, Format::plain);
MEGATRON_CHECKPOINT_BENCH(Save, plain_twin, Format::plain_twin);
MEGATRON_CHECKPOINT_BENCH(Load, checksummed, Format::checksummed, false);
MEGATRON_CHECKPOINT_BENCH(Load, hdf5_filter, Format::hdf5_filter, false);
MEGATRON_CHECKPOINT_BENCH(Load, chunked, Format::chunked, false);
MEGATRON_CHECKPOINT_BENCH(Load, plain, Format::plain, false);
MEGATRON_CHECKPOINT_BENCH(Load, plain_twin, Format::plain_twin, false);
MEGATRON_CHECKPOINT_BENCH(Load, checksummed_cold, Format::checksummed, true);
MEGATRON_CHECKPOINT_BENCH(Load, hdf5_filter_cold, Format::hdf5_filter, true);
MEGATRON_CHECKPOINT_BENCH(Load, chunked_cold, Format::chunked, true);
MEGATRON_CHECKPOINT_BENCH(Load, plain_cold, Format::plain, true);
MEGATRON_CHECKPOINT_BENCH(Load, plain_twin_cold, Format::plain_twin, true);

}  // namespace

BENCHMARK_MAIN();
