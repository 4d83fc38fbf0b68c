// The chunk database: per-block chunking and BERT re-tokenization, the blocks shared over ranks
// and resumed from the files already written, and rank 0's merge into the train database.
#include "chunk_db.h"

#include <optional>

#include "megatron/data/indexed_dataset.h"
#include "megatron/error.h"
#include "megatron/io/array_file.h"

namespace megatron::retro_data {

namespace {

namespace fs = std::filesystem;

// A block of consecutive documents of one dataset and the file it is written to.
struct Block {
  std::size_t dataset = 0;
  std::int64_t first = 0, last = 0;  // documents [first, last)
  fs::path file;
};

std::string file_sizes(const std::string& prefix) {
  return std::to_string(fs::file_size(prefix + ".idx")) + " + " +
         std::to_string(fs::file_size(prefix + ".bin")) + " bytes";
}

const data::BlendSpec& data_path_blend(const RetroDataOptions& options) {
  if (!options.gpt.blends.blend) {
    throw ConfigError(
        "[data] data_path: Retro's chunk database is built from the data_path blend (as "
        "Megatron's); per-split train/valid/test_data_path are not supported by `retro`");
  }
  return *options.gpt.blends.blend;
}

// The fraction of each dataset's documents that are train documents (the split's first weight).
double train_fraction(const RetroDataOptions& options) {
  const auto& train = options.gpt.blends.split_matrix[0];
  return train ? train->end - train->begin : 0.0;
}

// Blocks of retro_doc_block_size sequences of each dataset (Megatron's doc ids).
std::vector<Block> plan_blocks(const RetroDataOptions& options,
                               const std::vector<std::int64_t>& sequences) {
  const data::BlendSpec& blend = data_path_blend(options);
  std::vector<Block> blocks;
  for (std::size_t d = 0; d < sequences.size(); ++d) {
    const fs::path dir =
        options.workdir / "db" /
        (std::to_string(d) + "_" + fs::path(blend.prefixes[d]).filename().string());
    for (std::int64_t first = 0; first < sequences[d]; first += options.doc_block_size) {
      const std::int64_t last = std::min(sequences[d], first + options.doc_block_size);
      blocks.push_back(
          {d, first, last, dir / (std::to_string(first) + "-" + std::to_string(last) + ".h5")});
    }
  }
  return blocks;
}

// The chunks of one block: [doc, start, end, bert length] rows, valid and invalid, and per
// document the running count of valid chunks.
std::map<std::string, Tensor> chunk_block(const IndexedDataset& dataset, const Block& block,
                                          std::int64_t chunk_length, const Tokenizer& gpt,
                                          const Tokenizer& bert) {
  std::vector<std::int64_t> valid, invalid, offsets;
  std::int64_t valid_count = 0;
  std::vector<TokenId> bert_ids;
  for (std::int64_t doc = block.first; doc < block.last; ++doc) {
    std::vector<std::int64_t> tokens = dataset.get(static_cast<std::size_t>(doc));
    if (!tokens.empty() && tokens.back() == gpt.eod()) tokens.pop_back();
    const auto length = static_cast<std::int64_t>(tokens.size());
    for (std::int64_t start = 0; start < length; start += chunk_length) {
      const std::int64_t end = std::min(length, start + chunk_length);
      const std::vector<TokenId> ids(tokens.begin() + start, tokens.begin() + end);
      bert_ids.clear();
      bert.encode(gpt.decode(ids), bert_ids);
      const auto bert_length = static_cast<std::int64_t>(bert_ids.size());
      auto& rows = bert_length == 0 ? invalid : valid;
      rows.insert(rows.end(), {doc, start, end, bert_length});
      if (bert_length > 0) ++valid_count;
    }
    offsets.insert(offsets.end(), {doc, valid_count});
  }
  auto table = [](const std::vector<std::int64_t>& v, std::int64_t columns) {
    return Tensor::from(v, {static_cast<std::int64_t>(v.size()) / columns, columns});
  };
  return {{"chunks_valid", table(valid, 4)},
          {"chunks_invalid", table(invalid, 4)},
          {"doc_offsets", table(offsets, 2)}};
}

// `docs`: each dataset's documents as Megatron's update_chunk_counts counts them
// (len(document_indices) - 1), of which the first int(train fraction x docs) are train documents;
// the blocks, like Megatron's, walk the sequences (the same thing in a GPT dataset).
void merge_blocks(const RetroDataOptions& options, const std::vector<Block>& blocks,
                  const std::vector<std::int64_t>& docs, const StageSettings& settings,
                  Logger& log) {
  const double fraction = train_fraction(options);
  std::vector<std::int64_t> chunks, offsets, stats;
  std::int64_t chunk_end = 0;
  for (std::size_t d = 0; d < docs.size(); ++d) {
    const std::int64_t docs_train =
        static_cast<std::int64_t>(fraction * static_cast<double>(docs[d]));
    std::int64_t valid = 0, train = 0, dropped = 0;
    const auto first_chunk = static_cast<std::int64_t>(chunks.size()) / kChunkColumns;
    for (const Block& block : blocks) {
      if (block.dataset != d) continue;
      const Tensor rows = io::read_array(block.file, "chunks_valid");
      const Tensor doc_offsets = io::read_array(block.file, "doc_offsets");
      dropped += io::array_shape(block.file, "chunks_invalid")[0];
      const std::int64_t* r = rows.data<std::int64_t>();
      for (std::int64_t i = 0; i < rows.size(0); ++i, ++valid) {
        if (r[i * 4] >= docs_train) continue;
        chunks.insert(chunks.end(), {static_cast<std::int64_t>(d), r[i * 4], r[i * 4 + 1],
                                     r[i * 4 + 2], r[i * 4 + 3]});
        ++train;
      }
      const std::int64_t* o = doc_offsets.data<std::int64_t>();
      std::int64_t block_start = chunk_end;
      for (std::int64_t i = 0; i < doc_offsets.size(0) && o[i * 2] < docs_train; ++i) {
        chunk_end = block_start + o[i * 2 + 1];
        offsets.insert(offsets.end(), {static_cast<std::int64_t>(d), o[i * 2], chunk_end});
      }
    }
    stats.insert(stats.end(), {docs[d], docs_train, valid, train, dropped, first_chunk});
    log.info(
        "retro build-db: dataset {} ({}): {} documents ({} train), {} chunks ({} of train "
        "documents), {} dropped for empty BERT text",
        d, data_path_blend(options).prefixes[d], docs[d], docs_train, valid, train, dropped);
  }
  auto table = [](const std::vector<std::int64_t>& v, std::int64_t columns) {
    return Tensor::from(v, {static_cast<std::int64_t>(v.size()) / columns, columns});
  };
  io::write_array_file(chunk_db_file(options),
                       {{"chunks", table(chunks, kChunkColumns)},
                        {"doc_offsets", table(offsets, 3)},
                        {"datasets", table(stats, kDatasetColumns)}},
                       settings);
}

}  // namespace

StageSettings chunk_db_settings(const RetroDataOptions& options) {
  const data::BlendSpec& blend = data_path_blend(options);
  StageSettings s;
  for (std::size_t d = 0; d < blend.prefixes.size(); ++d) {
    s["data_path." + std::to_string(d)] =
        blend.prefixes[d] + " (" + file_sizes(blend.prefixes[d]) + ")";
  }
  s["split"] = options.gpt.blends.split.value_or("");
  s["tokenizer_type"] = options.gpt.tokenizer_type;
  s["vocab_file"] = options.gpt.tokenizer_files.vocab_file;
  s["merge_file"] = options.gpt.tokenizer_files.merge_file;
  s["tokenizer_model"] = options.gpt.tokenizer_files.tokenizer_model;
  s["retro_chunk_length"] = std::to_string(options.chunk_length);
  s["retro_doc_block_size"] = std::to_string(options.doc_block_size);
  s["retro_bert_tokenizer_type"] = options.bert_tokenizer_type;
  s["retro_bert_vocab_file"] = options.bert_tokenizer_files.vocab_file;
  return s;
}

fs::path chunk_db_file(const RetroDataOptions& options) {
  return options.workdir / "db" / "chunks.h5";
}

void build_chunk_db(const RetroDataOptions& options, ParallelState& parallel, Logger& log) {
  const StageSettings settings = chunk_db_settings(options);
  const fs::path merged = chunk_db_file(options);
  bool done = false;
  on_all_ranks(parallel, "build-db", [&] {
    if (fs::exists(merged)) {
      check_settings(merged, io::read_array_attributes(merged), settings);
      done = true;
    }
  });
  if (done) {
    log.info("retro build-db: {} is complete for these settings; nothing to do", merged.string());
    return;
  }
  const data::BlendSpec& blend = data_path_blend(options);
  std::vector<std::unique_ptr<IndexedDataset>> datasets;
  std::vector<std::int64_t> sequences, docs;
  for (const std::string& prefix : blend.prefixes) {
    datasets.push_back(std::make_unique<IndexedDataset>(prefix));
    sequences.push_back(static_cast<std::int64_t>(datasets.back()->size()));
    docs.push_back(static_cast<std::int64_t>(datasets.back()->document_count()));
  }
  const std::vector<Block> blocks = plan_blocks(options, sequences);
  const auto gpt = make_tokenizer(options.gpt.tokenizer_type, options.gpt.tokenizer_files);
  const auto bert = make_tokenizer(options.bert_tokenizer_type, options.bert_tokenizer_files);
  std::vector<fs::path> files;
  for (const Block& block : blocks)
    files.push_back(block.file);
  make_own_blocks(parallel, "build-db", files, settings, log, [&](std::size_t b) {
    const Block& block = blocks[b];
    io::write_array_file(
        block.file, chunk_block(*datasets[block.dataset], block, options.chunk_length, *gpt, *bert),
        settings);
    return BlockWork{"dataset " + std::to_string(block.dataset) + ", documents " +
                         std::to_string(block.first) + "-" + std::to_string(block.last),
                     static_cast<double>(block.last - block.first), "documents"};
  });
  on_all_ranks(parallel, "build-db", [&] {
    if (parallel.world_rank() == 0) merge_blocks(options, blocks, docs, settings, log);
  });
}

ChunkDb read_chunk_db(const RetroDataOptions& options) {
  const fs::path file = chunk_db_file(options);
  if (!fs::exists(file)) {
    throw ConfigError("[data] retro_workdir: " + options.workdir.string() +
                      " has no chunk database (" + file.string() +
                      "); run `megatron-app retro build-db` with this config first");
  }
  ChunkDb db;
  db.settings = chunk_db_settings(options);
  check_settings(file, io::read_array_attributes(file), db.settings);
  db.chunks = io::read_array(file, "chunks");
  db.datasets = io::read_array(file, "datasets");
  db.prefixes = data_path_blend(options).prefixes;
  return db;
}

}  // namespace megatron::retro_data
