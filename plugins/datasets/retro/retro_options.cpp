// The retro dataset's keys: the gpt dataset's, then Megatron's --retro-* preprocessing arguments
// (snake_case) with their defaults.
#include "retro_options.h"

#include "megatron/error.h"

namespace megatron::retro_data {

void declare_retro_data_config(config::TableSchema& s) {
  using config::Range;
  gpt_data::declare_gpt_data_config(s);
  s.add({"retro_workdir",
         config::ValueKind::path,
         config::Presence::required,
         std::string{},
         {},
         {},
         "folder of the retrieval pipeline's outputs (Megatron's retro_project_dir): the chunk "
         "database, and later the embeddings, index and neighbours"})
      .integer("retro_chunk_length", 64, "GPT tokens per chunk", Range::at_least(1))
      .integer("retro_num_neighbors", 2, "neighbours per chunk in a sample (k)", Range::at_least(1))
      .integer("retro_num_retrieved_chunks", 2,
               "chunks per neighbour: the neighbour and its continuation (r = this x "
               "retro_chunk_length tokens)",
               Range::at_least(1))
      .integer("retro_doc_block_size", 100000,
               "documents per chunk-database block file (the unit an interrupted build-db "
               "resumes from)",
               Range::at_least(1))
      .string("retro_bert_tokenizer_type", "BertWordPieceLowerCase",
              "the tokenizer chunks are re-tokenized with for BERT",
              {"BertWordPieceLowerCase", "BertWordPieceCase"})
      .optional_path("retro_bert_vocab_file", "the BERT WordPiece vocabulary")
      .optional_path("retro_bert_load",
                     "the BERT checkpoint (a file or a checkpoint folder) the chunks are embedded "
                     "with: one trained by this project's `bert` plugin, any layout")
      .integer("retro_bert_max_chunk_length", 256,
               "BERT tokens per chunk, [CLS] and [SEP] included (longer chunks are cut)",
               Range::at_least(3))
      .integer("retro_bert_batch_size", 128, "chunks per BERT forward when embedding",
               Range::at_least(1))
      .optional_string("retro_index_str",
                       "the Faiss index, as Faiss's index factory names it (Flat, "
                       "IVF4096,Flat, OPQ32_64,IVF65536_HNSW8,PQ32, ...)")
      .optional_integer("retro_index_ntrain",
                        "chunks the index is trained on (each dataset's share by its data_path "
                        "weight, taken from its first train chunks)",
                        Range::at_least(1))
      .integer("retro_query_num_neighbors_query", 200,
               "neighbours searched per chunk before those of the sample's own documents are "
               "removed",
               Range::at_least(1))
      .integer("retro_query_num_neighbors_save", 20, "neighbours kept per chunk",
               Range::at_least(1))
      .integer("retro_query_nprobe", 65536, "IVF lists searched (indexes with IVF)",
               Range::at_least(1))
      .integer("retro_query_ef_search", 256, "HNSW search depth (indexes with HNSW)",
               Range::at_least(1))
      .boolean("retro_verify_neighbor_count", true,
               "refuse neighbours queried for another number of samples (false: samples "
               "beyond them reuse the first ones' neighbours, as Megatron wraps)")
      .integer("retro_block_size", 100000,
               "chunks per embedding block file (the unit an interrupted embed resumes from)",
               Range::at_least(1));
}

RetroDataOptions read_retro_data_options(const config::ConfigTable& t,
                                         const config::CoreConfig& core) {
  RetroDataOptions o;
  o.gpt = gpt_data::read_gpt_data_options(t, core);
  o.workdir = std::filesystem::absolute(t.string("retro_workdir")).lexically_normal();
  o.chunk_length = t.integer("retro_chunk_length");
  o.num_neighbors = t.integer("retro_num_neighbors");
  o.num_retrieved_chunks = t.integer("retro_num_retrieved_chunks");
  o.doc_block_size = t.integer("retro_doc_block_size");
  o.bert_tokenizer_type = t.string("retro_bert_tokenizer_type");
  if (!t.has("retro_bert_vocab_file")) {
    t.fail("retro_bert_vocab_file",
           "the chunk database re-tokenizes each chunk with BERT's WordPiece vocabulary; name "
           "its file (e.g. data/bert-base-uncased-vocab.txt)");
  }
  o.bert_tokenizer_files.vocab_file =
      std::filesystem::absolute(t.string("retro_bert_vocab_file")).lexically_normal().string();
  if (!std::filesystem::is_regular_file(o.bert_tokenizer_files.vocab_file)) {
    t.fail("retro_bert_vocab_file", "no such file: " + o.bert_tokenizer_files.vocab_file);
  }
  if (t.has("retro_bert_load"))
    o.bert_load = std::filesystem::absolute(t.string("retro_bert_load")).lexically_normal();
  o.bert_max_chunk_length = t.integer("retro_bert_max_chunk_length");
  o.bert_batch_size = t.integer("retro_bert_batch_size");
  o.block_size = t.integer("retro_block_size");
  o.query_neighbors_query = t.integer("retro_query_num_neighbors_query");
  o.query_neighbors_save = t.integer("retro_query_num_neighbors_save");
  o.query_nprobe = t.integer("retro_query_nprobe");
  o.query_ef_search = t.integer("retro_query_ef_search");
  o.verify_neighbor_count = t.boolean("retro_verify_neighbor_count");
  if (t.has("retro_index_str")) o.index_str = t.string("retro_index_str");
  o.index_ntrain = t.find_integer("retro_index_ntrain").value_or(0);
  return o;
}

}  // namespace megatron::retro_data
