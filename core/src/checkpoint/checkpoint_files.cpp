// Checkpoint file names, the latest-iteration marker, and crash-safe renames.
#include "checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/hdf5_util.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"

namespace megatron::checkpoint {

namespace fs = std::filesystem;

namespace {

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

// The marker's text as an iteration; throws naming the marker.
std::int64_t parse_marker(const fs::path& marker) {
  std::ifstream in(marker, std::ios::binary);
  if (!in) throw Error(marker.string() + ": cannot read: " + std::strerror(errno));
  const std::string text = trim({std::istreambuf_iterator<char>(in), {}});
  if (text.empty()) {
    throw Error(marker.string() + ": is empty; expected the latest iteration number");
  }
  std::int64_t iteration = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), iteration);
  if (error != std::errc() || end != text.data() + text.size() || iteration < 0) {
    const std::string shown = text.size() > 40 ? text.substr(0, 40) + "..." : text;
    throw Error(marker.string() + ": expected the latest iteration number, found '" + shown + "'" +
                (text == "release" ? " (Megatron release checkpoints are not supported)" : ""));
  }
  return iteration;
}

}  // namespace

fs::path checkpoint_file(const fs::path& dir, std::int64_t iteration) {
  char name[64];
  std::snprintf(name, sizeof name, "iter_%07lld.h5", static_cast<long long>(iteration));
  return dir / name;
}

fs::path latest_marker(const fs::path& dir) {
  return dir / "latest_checkpointed_iteration.txt";
}

std::optional<std::int64_t> latest_iteration(const fs::path& dir) {
  const fs::path marker = latest_marker(dir);
  std::error_code error;
  if (!fs::exists(marker, error)) return std::nullopt;
  const std::int64_t iteration = parse_marker(marker);
  const fs::path file = checkpoint_file(dir, iteration);
  if (!fs::is_regular_file(file, error)) {
    throw Error(marker.string() + ": names iteration " + std::to_string(iteration) + " but " +
                file.string() + " does not exist");
  }
  return iteration;
}

fs::path resolve_checkpoint(const fs::path& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    throw Error(path.string() + ": no such checkpoint file or directory");
  }
  if (!fs::is_directory(status)) return path;
  const std::optional<std::int64_t> iteration = latest_iteration(path);
  if (!iteration) {
    throw Error(path.string() + ": not a checkpoint directory: it has no " +
                latest_marker(path).filename().string() + " (nothing saved there yet?)");
  }
  return checkpoint_file(path, *iteration);
}

std::vector<fs::path> checkpoints_from_latest(const fs::path& path) {
  const fs::path latest = resolve_checkpoint(path);
  std::error_code error;
  if (!fs::is_directory(path, error)) return {latest};
  const std::int64_t newest = *latest_iteration(path);
  std::vector<std::pair<std::int64_t, fs::path>> older;
  for (const auto& entry : fs::directory_iterator(path, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("iter_") || !name.ends_with(".h5") || !entry.is_regular_file(error))
      continue;
    std::int64_t iteration = -1;
    const char* digits = name.data() + 5;
    const char* end = name.data() + name.size() - 3;
    const auto [stop, failed] = std::from_chars(digits, end, iteration);
    if (failed == std::errc() && stop == end && iteration < newest &&
        entry.path() == checkpoint_file(path, iteration)) {
      older.emplace_back(iteration, entry.path());
    }
  }
  std::sort(older.begin(), older.end(), std::greater<>());
  std::vector<fs::path> files{latest};
  for (auto& [iteration, file] : older)
    files.push_back(std::move(file));
  return files;
}

namespace detail {

void durable_rename(const fs::path& from, const fs::path& to) {
  fsync_path(from, false);
  std::error_code error;
  fs::rename(from, to, error);
  if (error) {
    throw Error(to.string() + ": cannot rename " + from.filename().string() +
                " into place: " + error.message());
  }
  fsync_path(to.parent_path().empty() ? fs::path(".") : to.parent_path(), true);
}

void write_latest_marker(const fs::path& dir, std::int64_t iteration) {
  const fs::path marker = latest_marker(dir);
  const fs::path temporary = marker.string() + kPartialSuffix;
  const std::string text = std::to_string(iteration);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(temporary.string() + ": cannot create: " + std::strerror(errno));
  const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  int saved_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (written) saved_errno = errno;
  if (!written || !closed) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw Error(temporary.string() + ": cannot write: " + std::strerror(saved_errno));
  }
  try {
    durable_rename(temporary, marker);
  } catch (...) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw;
  }
}

void remove_stale_partials(const fs::path& dir) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("iter_") && name.ends_with(std::string(".h5") + kPartialSuffix) &&
        entry.is_regular_file(error)) {
      fs::remove(entry.path(), error);
    }
  }
}

}  // namespace detail

}  // namespace megatron::checkpoint
