// Megatron's Retro chunk database (`megatron-app retro build-db`): each document of each dataset
// of data_path cut into consecutive chunks of retro_chunk_length GPT tokens (its end-of-document
// token removed, the last chunk shorter), each chunk's text re-tokenized with BERT WordPiece and
// the chunks whose BERT text is empty dropped. Built in blocks of documents (the unit a killed
// run resumes from), then merged into Megatron's "train" database: the chunks of each dataset's
// first int(train fraction x documents) documents, which the index holds and neighbours point to.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "megatron/log.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/tensor/tensor.h"
#include "pipeline_stage.h"
#include "retro_options.h"

namespace megatron::retro_data {

// Columns of the merged database's `chunks` array (Megatron's chunk db entries).
enum ChunkColumn { kDatasetIndex = 0, kDocId, kTokenStart, kTokenEnd, kBertLength, kChunkColumns };
// Columns of the merged database's `datasets` array, one row per dataset of data_path.
enum DatasetColumn {
  kDocs = 0,       // documents
  kDocsTrain,      // int(train fraction x documents): the documents whose chunks are in `chunks`
  kChunksValid,    // chunks with non-empty BERT text, all documents
  kChunksTrain,    // of those, the chunks of the train documents
  kChunksInvalid,  // chunks dropped for empty BERT text
  kFirstChunk,     // the dataset's first row in `chunks`
  kDatasetColumns
};

// What the database is made from (stored with its files; the later stages' files add theirs).
StageSettings chunk_db_settings(const RetroDataOptions& options);

// The merged database file.
std::filesystem::path chunk_db_file(const RetroDataOptions& options);

// Builds the missing blocks (shared round-robin over the world's ranks), then rank 0 merges
// them; an existing complete database with the same settings is kept. Every rank returns when
// the database is complete.
void build_chunk_db(const RetroDataOptions& options, ParallelState& parallel, Logger& log);

// The merged database, read back.
struct ChunkDb {
  StageSettings settings;  // what it was made from
  Tensor chunks;           // (n, kChunkColumns) i64
  Tensor datasets;         // (datasets, kDatasetColumns) i64
  std::vector<std::string> prefixes;
};
// Reads it; ConfigError naming the stage to run when it is missing or was built from other
// settings.
ChunkDb read_chunk_db(const RetroDataOptions& options);

}  // namespace megatron::retro_data
