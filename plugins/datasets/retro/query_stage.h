// `megatron-app retro query`: Megatron's neighbours. Every chunk of the train/valid/test samples
// of the GPT dataset that training reads (in its order; chunk c = tokens [c m, (c + 1) m)
// of the sample, seq_length a multiple of m) is embedded with the embed stage's BERT and searched
// in the index (retro_query_num_neighbors_query, nprobe / efSearch); neighbours from any document
// the sample reads (same dataset) are removed and the first retro_query_num_neighbors_save kept
// (-1 pads). Block files query/<split>/<first>-<last>.h5 (`neighbors` (chunks, save) i64) of
// retro_block_size chunks, shared over ranks and resumed, labelled with the index's settings, the
// query's and the split's samples, sequence length and seed, so training refuses neighbours
// queried for another dataset.
#pragma once

#include <array>

#include "chunk_db.h"
#include "gpt_dataset.h"
#include "megatron/dataset.h"

namespace megatron::retro_data {

// l = seq_length / retro_chunk_length; ConfigError unless it divides (as Megatron asserts).
std::int64_t chunks_per_sample(const RetroDataOptions& options);

// The samples of a split that are queried: those training reads, min(built, wanted) (Megatron's
// num_active_samples).
std::int64_t queried_samples(const gpt_data::GptDataset& gpt, data::Split split,
                             const std::array<std::int64_t, 3>& wanted);

// Queries the splits of `gpt` (built for `wanted` samples).
void query_neighbors(const RetroDataOptions& options, const gpt_data::GptDataset& gpt,
                     const std::array<std::int64_t, 3>& wanted, const CommandServices& services,
                     ParallelState& parallel, Logger& log);

// The neighbours of a split, (queried chunks, save) i64, checked against the database, the
// config's index and query settings and the split's queried samples (their count unless
// retro_verify_neighbor_count is false); ConfigError naming the stage to run or the difference.
Tensor read_neighbors(const RetroDataOptions& options, const gpt_data::GptDataset& gpt,
                      const std::array<std::int64_t, 3>& wanted, const ChunkDb& db,
                      data::Split split);

}  // namespace megatron::retro_data
