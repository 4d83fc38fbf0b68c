// What generation keeps of a model's parameters: their values only, the gradients training
// allocates released, and, with bf16 (or fp16) compute, each weight read only by GEMMs or as
// embedding rows (Parameter::narrowable) held in that dtype alone, as Megatron's inference holds
// a bf16 model. The GEMMs then read the very values the training path's per-call casts give; the
// embedding rows are the weights rounded to bf16.
#pragma once

#include <cstdint>

#include "megatron/nn/parameter.h"

namespace megatron::inference {

struct HeldWeights {
  std::int64_t bytes_before = 0;  // values and gradients as built
  std::int64_t bytes = 0;         // the values held now
  std::int64_t narrowed = 0;      // parameters now in the compute dtype
};

HeldWeights hold_for_generation(ParameterSet& params, DType compute);

}  // namespace megatron::inference
