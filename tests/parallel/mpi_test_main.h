// The MpiRuntime shared by the tests of an MPI gtest binary (see mpi_test_main.cpp).
#pragma once

#include "megatron/parallel/mpi_runtime.h"

namespace megatron::test {

// The runtime main() created; valid while tests run.
MpiRuntime& mpi_runtime();

}  // namespace megatron::test
