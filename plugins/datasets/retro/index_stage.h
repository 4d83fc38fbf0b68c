// `megatron-app retro index`: Megatron's Retro index. A Faiss index from retro_index_str (any
// string Faiss's index factory takes: Flat, IVF4096,Flat, OPQ32_64,IVF65536_HNSW8,PQ32...),
// trained on the embeddings of Megatron's "sampled" chunks (each dataset's first
// int(retro_index_ntrain x weight / total weight) train chunks), then given every chunk of the
// database, id = its row; written with Faiss's own I/O (index/<index string>/index.faiss) beside
// an array file with the settings it was made from (index.h5 there, written last: the stage's
// mark of completion). Several index strings may share a workdir.
#pragma once

#include <filesystem>
#include <memory>

#include "chunk_db.h"

namespace faiss {
struct Index;
}

namespace megatron::retro_data {

void build_index(const RetroDataOptions& options, ParallelState& parallel, Logger& log);

struct RetroIndex {
  std::unique_ptr<faiss::Index> index;
  StageSettings settings;  // the database's, the embedder's and the index's
};
// ConfigError naming the stage to run when it is missing, or the setting when it was made from
// other settings.
RetroIndex read_index(const RetroDataOptions& options, const ChunkDb& db);

}  // namespace megatron::retro_data
