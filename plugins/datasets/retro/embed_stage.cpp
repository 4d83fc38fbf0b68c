// The embed stage: the database's chunks as text, BERT-embedded batch by batch into block files.
#include "embed_stage.h"

#include "bert_embedder.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/error.h"
#include "megatron/io/array_file.h"

namespace megatron::retro_data {

namespace {

// The database's settings and the embedder's: what an embedding block is made from.
StageSettings embed_settings(const StageSettings& db, const RetroDataOptions& options,
                             const std::string& bert_identity) {
  StageSettings s = db;
  s["retro_bert_load"] = bert_identity;
  s["retro_bert_max_chunk_length"] = std::to_string(options.bert_max_chunk_length);
  s["retro_block_size"] = std::to_string(options.block_size);
  return s;
}

// The texts of database rows [first, last): each chunk's GPT tokens detokenized.
std::vector<std::string> chunk_texts(const ChunkDb& db,
                                     const std::vector<std::unique_ptr<IndexedDataset>>& data,
                                     const Tokenizer& gpt, std::int64_t first, std::int64_t last) {
  std::vector<std::string> texts;
  const std::int64_t* c = db.chunks.data<std::int64_t>();
  for (std::int64_t i = first; i < last; ++i) {
    const std::int64_t* row = c + i * kChunkColumns;
    std::vector<std::int32_t> ids(static_cast<std::size_t>(row[kTokenEnd] - row[kTokenStart]));
    data[static_cast<std::size_t>(row[kDatasetIndex])]->read(
        static_cast<std::size_t>(row[kDocId]), static_cast<std::size_t>(row[kTokenStart]), ids);
    texts.push_back(gpt.decode(ids));
  }
  return texts;
}

void embed_block(const EmbeddingBlock& block, const ChunkDb& db,
                 const std::vector<std::unique_ptr<IndexedDataset>>& data, const Tokenizer& gpt,
                 const BertEmbedder& bert, std::int64_t batch_size, const StageSettings& settings) {
  Tensor out = Tensor::empty({block.last - block.first, bert.hidden_size()}, DType::f32);
  for (std::int64_t first = block.first; first < block.last; first += batch_size) {
    const std::int64_t last = std::min(block.last, first + batch_size);
    const Tensor e = bert.embed(chunk_texts(db, data, gpt, first, last));
    std::copy(e.data<float>(), e.data<float>() + e.numel(),
              out.data<float>() + (first - block.first) * bert.hidden_size());
  }
  io::write_array_file(block.file, {{"embeddings", out}}, settings);
}

}  // namespace

std::vector<EmbeddingBlock> embedding_blocks(const RetroDataOptions& options, std::int64_t chunks) {
  std::vector<EmbeddingBlock> blocks;
  for (std::int64_t first = 0; first < chunks; first += options.block_size) {
    const std::int64_t last = std::min(chunks, first + options.block_size);
    blocks.push_back(
        {first, last,
         options.workdir / "embed" / (std::to_string(first) + "-" + std::to_string(last) + ".h5")});
  }
  return blocks;
}

void embed_chunks(const RetroDataOptions& options, const CommandServices& services,
                  ParallelState& parallel, Logger& log) {
  if (options.bert_load.empty()) {
    throw ConfigError(
        "[data] retro_bert_load: `retro embed` needs the BERT checkpoint the chunks "
        "are embedded with (e.g. checkpoints/bert_tiny)");
  }
  const ChunkDb db = read_chunk_db(options);
  const auto bert_tokens =
      make_tokenizer(options.bert_tokenizer_type, options.bert_tokenizer_files);
  const auto gpt = make_tokenizer(options.gpt.tokenizer_type, options.gpt.tokenizer_files);
  const BertEmbedder bert(options.bert_load, *bert_tokens, options.bert_max_chunk_length, services,
                          parallel, log);
  const StageSettings settings = embed_settings(db.settings, options, bert.identity());
  std::vector<std::unique_ptr<IndexedDataset>> data;
  for (const std::string& prefix : db.prefixes)
    data.push_back(std::make_unique<IndexedDataset>(prefix));
  const std::vector<EmbeddingBlock> blocks = embedding_blocks(options, db.chunks.size(0));
  std::vector<std::filesystem::path> files;
  for (const EmbeddingBlock& block : blocks)
    files.push_back(block.file);
  make_own_blocks(parallel, "embed", files, settings, log, [&](std::size_t b) {
    const EmbeddingBlock& block = blocks[b];
    embed_block(block, db, data, *gpt, bert, options.bert_batch_size, settings);
    return BlockWork{"chunks " + std::to_string(block.first) + "-" + std::to_string(block.last),
                     static_cast<double>(block.last - block.first), "chunks"};
  });
  log.info("retro embed: {} chunks embedded with {} (hidden {})", db.chunks.size(0),
           bert.identity(), bert.hidden_size());
}

Embeddings read_embeddings(const RetroDataOptions& options, const ChunkDb& db) {
  Embeddings out;
  std::vector<Tensor> parts;
  std::int64_t hidden = 0;
  for (const EmbeddingBlock& block : embedding_blocks(options, db.chunks.size(0))) {
    if (!std::filesystem::exists(block.file)) {
      throw ConfigError("[data] retro_workdir: " + block.file.string() +
                        " is missing; run `megatron-app retro embed` with this config first");
    }
    const StageSettings stored = io::read_array_attributes(block.file);
    if (out.settings.empty()) {
      // The database's settings must hold; the embedder's are whatever embed used.
      StageSettings db_part;
      for (const auto& [key, value] : db.settings) {
        const auto it = stored.find(key);
        if (it != stored.end()) db_part[key] = it->second;
      }
      check_settings(block.file, db_part, db.settings);
      out.settings = stored;
    } else {
      check_settings(block.file, stored, out.settings);
    }
    parts.push_back(io::read_array(block.file, "embeddings"));
    hidden = parts.back().size(1);
  }
  out.values = Tensor::empty({db.chunks.size(0), hidden}, DType::f32);
  std::int64_t at = 0;
  for (const Tensor& p : parts) {
    if (p.size(1) != hidden) throw Error("retro embed: blocks of different hidden sizes");
    std::copy(p.data<float>(), p.data<float>() + p.numel(), out.values.data<float>() + at);
    at += p.numel();
  }
  return out;
}

}  // namespace megatron::retro_data
