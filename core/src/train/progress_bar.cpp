// Terminal progress bar for the training loop.
#include "progress_bar.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace megatron::train {

ProgressBar::ProgressBar(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO) != 0) {}

void ProgressBar::update(std::int64_t done, std::int64_t total) {
  if (!enabled_ || total <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (first_ < 0) {
    first_ = done;
    start_ = now;
  }
  const int width = 30;
  const auto filled = static_cast<int>(width * done / total);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(width, '.');
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const std::int64_t run = done - first_;
  const double eta =
      run > 0 ? seconds / static_cast<double>(run) * static_cast<double>(total - done) : 0.0;
  std::fprintf(stderr, "\r[%s] %lld/%lld iterations, ETA %.0f s ", bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total), eta);
  std::fflush(stderr);
  shown_ = true;
}

void ProgressBar::clear() {
  if (!shown_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace megatron::train
