# Finds every third-party dependency; all come from Debian packages (scripts/install-deps.sh).
find_package(Boost 1.74 REQUIRED COMPONENTS program_options filesystem)
find_package(tomlplusplus REQUIRED)
find_package(spdlog REQUIRED)
find_package(MPI REQUIRED COMPONENTS C CXX)
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)

# Parallel HDF5 (the OpenMPI build) so ranks can write slices of one checkpoint through MPI-IO.
set(HDF5_PREFER_PARALLEL ON)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "megatron-app needs parallel HDF5 (Debian: libhdf5-openmpi-dev); found a serial build at ${HDF5_INCLUDE_DIRS}")
endif()

find_package(OpenBLAS CONFIG QUIET)
if(NOT OpenBLAS_FOUND)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
endif()
find_package(dnnl REQUIRED)

if(MEGATRON_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(benchmark QUIET)
endif()
