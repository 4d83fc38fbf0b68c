# Enables the CUDA language when nvcc is present (MEGATRON_CUDA=AUTO), or insists on it (ON).
set(MEGATRON_HAVE_CUDA OFF)
if(NOT MEGATRON_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    enable_language(CUDA)
    # Workaround for CMake 3.25 (Debian 12's 3.25.1) with CUDA 13: its FindCUDAToolkit sets a
    # DEPRECATION property on CUDA::nvToolsExt whenever the project's minimum CMake version is
    # >= 3.25, without checking that the target exists, and CUDA 13 ships no libnvToolsExt, so
    # configure stops with "set_property could not find TARGET CUDA::nvToolsExt". The module reads
    # CMAKE_MINIMUM_REQUIRED_VERSION only for that warning; showing it 3.24 for this one call skips
    # the warning and nothing else (policies were set by cmake_minimum_required and stay as set).
    set(_megatron_minimum_version "${CMAKE_MINIMUM_REQUIRED_VERSION}")
    set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_MINIMUM_REQUIRED_VERSION "${_megatron_minimum_version}")
    unset(_megatron_minimum_version)
    set(MEGATRON_HAVE_CUDA ON)
    message(STATUS "megatron: CUDA backend enabled (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(MEGATRON_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MEGATRON_CUDA=ON but no CUDA compiler was found (looked for nvcc on PATH and /usr/local/cuda/bin/nvcc)")
  else()
    message(STATUS "megatron: no CUDA compiler found; building the CPU backend only")
  endif()
endif()
