// The memory pre-flight of a training run: before datasets are built or parameters allocated,
// each rank compares the memory `plan` computes for it with the memory it can use.
#pragma once

#include <string>

#include "megatron/parallel/mpi_runtime.h"
#include "megatron/tensor/device.h"
#include "session.h"

namespace megatron::app {

// Throws ConfigError (exit code 2) when this rank's planned need exceeds its memory budget (host
// memory; for a CUDA `device`, the device's free memory), giving both figures and the smallest
// tensor x pipeline layout that would fit, as a `plan` command line for `config_file`.
// [runtime] skip_memory_check turns it off.
void check_memory(Session& session, MpiRuntime& runtime, const Device& device,
                  const std::string& config_file);

}  // namespace megatron::app
