# Finds every third-party dependency; all come from Debian packages (scripts/install-deps.sh).
find_package(Boost 1.74 REQUIRED COMPONENTS program_options filesystem)
find_package(tomlplusplus REQUIRED)
find_package(spdlog REQUIRED)
find_package(MPI REQUIRED COMPONENTS C CXX)
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3 REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
# Unicode categories, normalisation (NFD) and sentence boundaries: WordPiece and preprocess.
find_package(ICU 72 REQUIRED COMPONENTS uc i18n)
# PCRE2 ships no CMake config in Debian; its pkg-config file gives an imported target.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# `serve`'s HTTP server: Debian's libcpp-httplib-dev (a compiled library with a pkg-config file).
pkg_check_modules(cpp_httplib REQUIRED IMPORTED_TARGET cpp-httplib)
# liburing: checkpoint loads on one compute thread queue their reads through io_uring
# (core/src/checkpoint/ring_reads.h); a kernel that refuses io_uring at run time is read otherwise.
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
# SentencePiece (Megatron's SentencePieceTokenizer, GPTSentencePieceTokenizer): Debian's
# sentencepiece.pc also lists the trainer library, which nothing here needs, so only the processor
# library and its header are taken.
find_path(MEGATRON_SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h REQUIRED)
find_library(MEGATRON_SENTENCEPIECE_LIBRARY sentencepiece REQUIRED)

# Parallel HDF5 (the OpenMPI build) so ranks can write slices of one checkpoint through MPI-IO.
set(HDF5_PREFER_PARALLEL ON)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "megatron-app needs parallel HDF5 (Debian: libhdf5-openmpi-dev); found a serial build at ${HDF5_INCLUDE_DIRS}")
endif()

# OpenBLAS ships a config file with variables only (no imported target).
find_package(OpenBLAS CONFIG REQUIRED)
set(MEGATRON_BLAS_LIBRARIES ${OpenBLAS_LIBRARIES})
set(MEGATRON_BLAS_INCLUDE_DIRS ${OpenBLAS_INCLUDE_DIRS})
find_package(dnnl REQUIRED)

if(MEGATRON_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(benchmark QUIET)
endif()
