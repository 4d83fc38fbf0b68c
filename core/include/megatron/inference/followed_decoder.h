// Generation on several ranks (tensor parallelism under mpirun), as Megatron's server does it:
// rank 0 runs the engine and, before each decoder call, broadcasts a command (start, prefill,
// step, release, stop) over the model's ranks; the other ranks follow, making the same call on
// their shards, so every collective inside the model meets its peers.
#pragma once

#include <memory>

#include "megatron/inference/decoder.h"
#include "megatron/parallel/communicator.h"

namespace megatron::inference {

// Rank 0's decoder: `inner` (its own shard's) with each call announced to the followers over
// `group` (rank 0 of it leads). Its destructor tells the followers to stop.
std::unique_ptr<Decoder> leading_decoder(std::unique_ptr<Decoder> inner, Communicator& group);

// The other ranks: makes rank 0's calls on `inner` until it stops.
void follow_decoder(Decoder& inner, Communicator& group);

}  // namespace megatron::inference
