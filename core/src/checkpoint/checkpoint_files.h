// File-system steps of a checkpoint save: crash-safe replacement of files and the latest marker.
#pragma once

#include <cstdint>
#include <filesystem>

namespace megatron::checkpoint::detail {

// Suffix of files being written; renamed away when complete.
inline constexpr const char* kPartialSuffix = ".partial";

// fsync `from`, rename it to `to` (replacing it), fsync the directory. Throws megatron::Error.
void durable_rename(const std::filesystem::path& from, const std::filesystem::path& to);

// Replaces latest_checkpointed_iteration.txt in `dir` through a temporary file and a rename.
void write_latest_marker(const std::filesystem::path& dir, std::int64_t iteration);

// Removes iter_*.h5.partial regular files an interrupted save left in `dir`.
void remove_stale_partials(const std::filesystem::path& dir);

}  // namespace megatron::checkpoint::detail
