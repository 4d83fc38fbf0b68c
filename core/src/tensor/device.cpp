// Device names and parsing.
#include "megatron/tensor/device.h"

#include <charconv>

#include "megatron/error.h"

namespace megatron {

std::string Device::str() const {
  switch (type) {
    case Type::cpu:
      return "cpu";
    case Type::cuda:
      return "cuda:" + std::to_string(index);
    case Type::meta:
      return "meta";
  }
  return "?";
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "meta") return meta();
  if (text == "cuda") return cuda(0);
  if (text.substr(0, 5) == "cuda:" && text.size() > 5) {
    int ordinal = -1;
    const auto digits = text.substr(5);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (ec == std::errc() && end == digits.data() + digits.size() && ordinal >= 0) return cuda(ordinal);
  }
  throw Error("\"" + std::string(text) + "\" is not a device (use cpu, meta, cuda or cuda:N)");
}

}  // namespace megatron
