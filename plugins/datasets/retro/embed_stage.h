// `megatron-app retro embed`: every chunk of the chunk database embedded with the BERT checkpoint
// (bert_embedder.h), in block files of retro_block_size chunks (embed/<first>-<last>.h5, array
// `embeddings` (rows, hidden) f32) shared round-robin over the world's ranks; a block file that
// exists with the same settings is kept, so an interrupted run resumes.
#pragma once

#include <filesystem>
#include <vector>

#include "chunk_db.h"
#include "megatron/dataset.h"

namespace megatron::retro_data {

struct EmbeddingBlock {
  std::int64_t first = 0, last = 0;  // rows [first, last) of the database's chunks
  std::filesystem::path file;
};

// The blocks of a database of `chunks` rows.
std::vector<EmbeddingBlock> embedding_blocks(const RetroDataOptions& options, std::int64_t chunks);

void embed_chunks(const RetroDataOptions& options, const CommandServices& services,
                  ParallelState& parallel, Logger& log);

// Every block's embeddings in row order, and what they were made from (the database's settings
// and the embedder's, the same for every block).
struct Embeddings {
  Tensor values;  // (chunks, hidden) f32
  StageSettings settings;
};
// ConfigError naming the stage to run when a block is missing, or naming the setting when a block
// was made from other settings than the database's or than the other blocks.
Embeddings read_embeddings(const RetroDataOptions& options, const ChunkDb& db);

}  // namespace megatron::retro_data
