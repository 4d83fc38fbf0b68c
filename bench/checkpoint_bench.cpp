// Checkpoint save and load time with per-chunk Fletcher32 checksums (the format) against the
// same tensors stored contiguously without checksums (the format before them), on one process:
// save = create, write, close, fsync, rename, marker; load = load_checkpoint of either file
// (it reads both formats), so only the storage differs. The
// tensors are GPT-shaped f32 weights of about `range(0)` MiB in all. Loads read a file the save
// just wrote, so they come from the page cache: the checksum's share is the largest it can be.
// Results are recorded in RESULTS.md.
//   checkpoint_bench --benchmark_min_time=1 [--benchmark_filter=...]   (MEGATRON_BENCH_DIR: where)
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/hdf5_util.h"
#include "checkpoint/tensor_io.h"
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

// The old format: contiguous datasets, no filters, the same crash-safe file steps.
void save_plain(const fs::path& dir, const checkpoint::CheckpointState& s) {
  const fs::path file = checkpoint::checkpoint_file(dir, s.iteration);
  const fs::path partial = file.string() + ".partial";
  {
    checkpoint::detail::Hdf5Lock lock;
    Handle fapl = checkpoint::detail::file_access_properties();
    Handle f(H5Fcreate(partial.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    checkpoint::detail::write_state_attributes(f.get(), s);
    Handle links(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_create_intermediate_group(links.get(), 1);
    for (const auto& [name, t] : s.tensors) {
      std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
      Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
      Handle d(H5Dcreate2(f.get(), name.c_str(), H5T_IEEE_F32LE, space.get(), links.get(),
                          H5P_DEFAULT, H5P_DEFAULT),
               H5Dclose);
      H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data());
    }
  }
  checkpoint::detail::durable_rename(partial, file);
  checkpoint::detail::write_latest_marker(dir, s.iteration);
}

void Save(benchmark::State& state, bool checksummed) {
  const auto s = gpt_like_state(state.range(0));
  const fs::path dir = bench_dir(checksummed ? "checksummed" : "plain");
  for (auto _ : state) {
    if (checksummed) {
      checkpoint::save_checkpoint(dir, s);
    } else {
      save_plain(dir, s);
    }
  }
  state.SetBytesProcessed(state.iterations() * (state.range(0) << 20));
  fs::remove_all(dir);
}

void Load(benchmark::State& state, bool checksummed) {
  const auto s = gpt_like_state(state.range(0));
  const fs::path dir = bench_dir(checksummed ? "checksummed_load" : "plain_load");
  checksummed ? void(checkpoint::save_checkpoint(dir, s)) : save_plain(dir, s);
  const fs::path file = checkpoint::checkpoint_file(dir, s.iteration);
  for (auto _ : state)
    benchmark::DoNotOptimize(checkpoint::load_checkpoint(file));
  state.SetBytesProcessed(state.iterations() * (state.range(0) << 20));
  fs::remove_all(dir);
}

BENCHMARK_CAPTURE(Save, checksummed, true)
    ->Arg(64)
    ->Arg(512)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(Save, plain, false)
    ->Arg(64)
    ->Arg(512)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(Load, checksummed, true)
    ->Arg(64)
    ->Arg(512)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(Load, plain, false)
    ->Arg(64)
    ->Arg(512)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
