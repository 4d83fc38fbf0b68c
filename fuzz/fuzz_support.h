// Shared by the libFuzzer targets: scratch files for readers that take paths, and seed writing.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

namespace megatron::fuzz {

// A per-process scratch directory, on tmpfs when there is one (the readers under test take paths:
// the indexed dataset and HDF5 map or open files, so each input is written out first).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path shm = "/dev/shm";
    const std::filesystem::path base =
        std::filesystem::is_directory(shm) ? shm : std::filesystem::temp_directory_path();
    auto path = base / ("megatron-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    return path;
  }();
  return dir;
}

inline std::filesystem::path write_scratch(const std::string& name, const std::uint8_t* data,
                                           std::size_t size) {
  const auto path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) std::abort();  // the harness itself failed: not a finding about the code under test
  return path;
}

// MEGATRON_FUZZ_SEEDS=DIR asks a target to write its seed inputs (made with the project's own
// writers, so they are valid files of the current format) into DIR; fuzz/run.sh sets it.
inline std::optional<std::filesystem::path> seed_dir() {
  const char* dir = std::getenv("MEGATRON_FUZZ_SEEDS");
  if (!dir || !*dir) return std::nullopt;
  std::filesystem::create_directories(dir);
  return std::filesystem::path(dir);
}

inline void write_seed(const std::filesystem::path& dir, const std::string& name,
                       std::string_view bytes) {
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace megatron::fuzz
