// Formats config source locations the way compilers do, so editors can jump to them.
#include "megatron/config/location.h"

namespace megatron::config {

std::string SourceLocation::to_string() const {
  if (file.empty()) return "(default)";
  if (line == 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

}  // namespace megatron::config
