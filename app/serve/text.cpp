// UTF-8 boundaries and stop strings for the server's answers.
#include "serve/text.h"

#include <algorithm>

namespace megatron::app::serve {

std::size_t complete_utf8_length(const std::string& text) {
  const std::size_t n = text.size();
  // Look back over at most three continuation bytes for the last lead byte.
  for (std::size_t back = 1; back <= std::min<std::size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    const std::size_t need = c < 0x80           ? 1
                             : (c >> 5) == 0x6  ? 2
                             : (c >> 4) == 0xE  ? 3
                             : (c >> 3) == 0x1E ? 4
                                                : 1;
    return back >= need ? n : n - back;
  }
  return n;
}

std::size_t stop_safe_length(const std::string& text, const std::vector<std::string>& stops) {
  std::size_t hold = 0;
  for (const std::string& stop : stops) {
    for (std::size_t k = std::min(stop.size() - (stop.empty() ? 0 : 1), text.size()); k > hold;
         --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return text.size() - hold;
}

std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stops) {
  std::size_t end = text.size();
  for (const std::string& stop : stops) {
    if (stop.empty()) continue;
    end = std::min(end, text.find(stop));
  }
  return text.substr(0, end);
}

}  // namespace megatron::app::serve
