// The versions the core library was built with, for the host's plugin checks and `--version`.
#include "megatron/version.h"

namespace megatron {

std::uint32_t core_api_major() {
  return kApiMajor;
}
std::uint32_t core_api_minor() {
  return kApiMinor;
}
const char* core_abi_tag() {
  return MEGATRON_ABI_TAG;
}
const char* core_version_string() {
  return MEGATRON_VERSION_STRING;
}

}  // namespace megatron
