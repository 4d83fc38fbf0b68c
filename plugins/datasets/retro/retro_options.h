// The [data] table of the `retro` dataset plugin: the `gpt` dataset's keys (Retro trains on the
// same samples) and Megatron's Retro preprocessing arguments for the stages built so far.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "gpt_options.h"

namespace megatron::retro_data {

struct RetroDataOptions {
  gpt_data::GptDataOptions gpt;
  std::filesystem::path workdir;             // retro_workdir: every stage's outputs
  std::int64_t chunk_length = 64;            // retro_chunk_length: GPT tokens per chunk
  std::int64_t num_neighbors = 2;            // retro_num_neighbors: k per chunk in a sample
  std::int64_t num_retrieved_chunks = 2;     // retro_num_retrieved_chunks: neighbour + continuation
  std::int64_t doc_block_size = 0;           // retro_doc_block_size: documents per DB block file
  std::string bert_tokenizer_type;           // retro_bert_tokenizer_type
  TokenizerFiles bert_tokenizer_files;       // retro_bert_vocab_file
  std::filesystem::path bert_load;           // retro_bert_load: the BERT checkpoint (empty: none)
  std::int64_t bert_max_chunk_length = 256;  // retro_bert_max_chunk_length, [CLS] + [SEP] included
  std::int64_t bert_batch_size = 128;        // retro_bert_batch_size: chunks per BERT forward
  std::string index_str;                     // retro_index_str: Faiss's index factory string
  std::int64_t index_ntrain = 0;             // retro_index_ntrain: chunks the index is trained on
  std::int64_t query_neighbors_query = 200;  // retro_query_num_neighbors_query: searched
  std::int64_t query_neighbors_save = 20;    // retro_query_num_neighbors_save: kept, filtered
  std::int64_t query_nprobe = 65536;         // retro_query_nprobe (IVF indexes)
  std::int64_t query_ef_search = 256;        // retro_query_ef_search (HNSW indexes)
  bool verify_neighbor_count = true;         // retro_verify_neighbor_count
  std::int64_t block_size = 100000;          // retro_block_size: chunks per embedding block file
};

void declare_retro_data_config(config::TableSchema& schema);
RetroDataOptions read_retro_data_options(const config::ConfigTable& table,
                                         const config::CoreConfig& core);

}  // namespace megatron::retro_data
