// A one-line progress bar on stderr, shown only when stderr is a terminal (logs and CI output
// stay clean); cleared before each regular log line.
#pragma once

#include <chrono>
#include <cstdint>

namespace megatron::train {

class ProgressBar {
 public:
  explicit ProgressBar(bool enabled);
  // Redraws: iteration `done` of `total`, with the time per iteration since the start.
  void update(std::int64_t done, std::int64_t total);
  // Erases the bar so a log line can be printed in its place.
  void clear();

 private:
  bool enabled_;
  bool shown_ = false;
  std::int64_t first_ = -1;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace megatron::train
