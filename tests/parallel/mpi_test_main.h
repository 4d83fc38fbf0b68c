// The MpiRuntime shared by the tests of an MPI gtest binary (see mpi_test_main.cpp).
#pragma once

#include "megatron/parallel/mpi_runtime.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron::test {

// The runtime main() created; valid while tests run.
MpiRuntime& mpi_runtime();

// The world's ParallelState with `sizes`, created on first use and released when the tests end
// (its communicators go before MPI does). One per binary: a later call with other sizes throws.
ParallelState& world_parallel_state(const ParallelSizes& sizes);

}  // namespace megatron::test
