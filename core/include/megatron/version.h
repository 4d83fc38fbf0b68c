// SDK version and ABI tag that every plugin is built against and the host checks at load time.
#pragma once

#include <cstdint>

// Versioning rules:
//  - MAJOR changes when a virtual interface, an SDK struct layout or a documented semantic changes.
//  - MINOR changes for additions only: new free functions or classes, descriptor fields appended.
// The host accepts a plugin when the majors are equal and the plugin's minor <= the core's minor.
#define MEGATRON_API_MAJOR 7
#define MEGATRON_API_MINOR 0

#define MEGATRON_STR_IMPL(x) #x
#define MEGATRON_STR(x) MEGATRON_STR_IMPL(x)

// What makes C++ objects safe to pass between host and plugin: compiler family and major version,
// the Itanium C++ ABI version and the libstdc++ std::string/std::list ABI.
#if defined(__clang__)
#define MEGATRON_COMPILER_TAG "clang" MEGATRON_STR(__clang_major__)
#elif defined(__GNUC__)
#define MEGATRON_COMPILER_TAG "gcc" MEGATRON_STR(__GNUC__)
#else
#define MEGATRON_COMPILER_TAG "unknown"
#endif
#if defined(_GLIBCXX_USE_CXX11_ABI)
#define MEGATRON_CXX11_ABI_TAG MEGATRON_STR(_GLIBCXX_USE_CXX11_ABI)
#else
#define MEGATRON_CXX11_ABI_TAG "none"
#endif
#define MEGATRON_ABI_TAG \
  MEGATRON_COMPILER_TAG "/gxxabi" MEGATRON_STR(__GXX_ABI_VERSION) "/cxx11ab" \
                                                                  "i" MEGATRON_CXX11_ABI_TAG

namespace megatron {

inline constexpr std::uint32_t kApiMajor = MEGATRON_API_MAJOR;
inline constexpr std::uint32_t kApiMinor = MEGATRON_API_MINOR;

// The version and ABI tag the core library itself was built with (the headers a plugin sees may
// differ from the library the host loaded; these functions tell the truth about the latter).
std::uint32_t core_api_major();
std::uint32_t core_api_minor();
const char* core_abi_tag();
const char* core_version_string();

}  // namespace megatron
