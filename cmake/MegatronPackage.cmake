# Installs the CMake package config so plugins can be built out of tree with find_package(megatron).
include(CMakePackageConfigHelpers)

file(STRINGS "${PROJECT_SOURCE_DIR}/core/include/megatron/version.h" _api_major REGEX "define MEGATRON_API_MAJOR")
file(STRINGS "${PROJECT_SOURCE_DIR}/core/include/megatron/version.h" _api_minor REGEX "define MEGATRON_API_MINOR")
string(REGEX REPLACE ".* ([0-9]+)$" "\\1" MEGATRON_API_MAJOR "${_api_major}")
string(REGEX REPLACE ".* ([0-9]+)$" "\\1" MEGATRON_API_MINOR "${_api_minor}")

set(MEGATRON_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/megatron")
configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/core/cmake/megatronConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/megatronConfig.cmake"
  INSTALL_DESTINATION "${MEGATRON_CMAKE_INSTALL_DIR}"
  PATH_VARS MEGATRON_PLUGIN_INSTALL_DIR)
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/megatronConfigVersion.cmake"
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)

install(EXPORT megatronTargets NAMESPACE megatron:: DESTINATION "${MEGATRON_CMAKE_INSTALL_DIR}")
install(FILES
  "${PROJECT_BINARY_DIR}/megatronConfig.cmake"
  "${PROJECT_BINARY_DIR}/megatronConfigVersion.cmake"
  "${PROJECT_SOURCE_DIR}/core/cmake/MegatronPlugin.cmake"
  DESTINATION "${MEGATRON_CMAKE_INSTALL_DIR}")
