// The index stage: Faiss's index factory, trained on the sampled chunks' embeddings, every chunk
// added in row order, written with Faiss's I/O and the settings file last.
#include "index_stage.h"

#include <faiss/Index.h>
#include <faiss/impl/FaissException.h>
#include <faiss/index_factory.h>
#include <faiss/index_io.h>

#include <cctype>
#include <chrono>

#include "embed_stage.h"
#include "megatron/error.h"
#include "megatron/io/array_file.h"

namespace megatron::retro_data {

namespace {

namespace fs = std::filesystem;

// index/<index string>/: one folder per index string, so a workdir holds several indexes (a
// Flat one beside an IVF one, as Megatron's index folders are named by their type).
fs::path index_dir(const RetroDataOptions& o) {
  std::string name;
  for (const char c : o.index_str)
    name += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ? c : '_';
  return o.workdir / "index" / name;
}
fs::path index_file(const RetroDataOptions& o) {
  return index_dir(o) / "index.faiss";
}
fs::path settings_file(const RetroDataOptions& o) {
  return index_dir(o) / "index.h5";
}

StageSettings index_settings(const StageSettings& embeddings, const RetroDataOptions& options) {
  StageSettings s = embeddings;
  s["retro_index_str"] = options.index_str;
  s["retro_index_ntrain"] = std::to_string(options.index_ntrain);
  return s;
}

// Megatron's sampled database: per dataset, its first int(ntrain x weight / total weight) train
// chunks (update_chunk_counts' n_chunks_sampled), as rows of the database.
std::vector<std::int64_t> sampled_rows(const RetroDataOptions& options, const ChunkDb& db) {
  const data::BlendSpec& blend = *options.gpt.blends.blend;
  std::vector<double> weights = blend.weights;
  if (weights.empty()) weights.assign(blend.prefixes.size(), 1.0);
  double total = 0;
  for (double w : weights)
    total += w;
  std::vector<std::int64_t> rows;
  const std::int64_t* stats = db.datasets.data<std::int64_t>();
  for (std::size_t d = 0; d < weights.size(); ++d) {
    const std::int64_t* s = stats + static_cast<std::int64_t>(d) * kDatasetColumns;
    const auto n =
        static_cast<std::int64_t>(static_cast<double>(options.index_ntrain) * weights[d] / total);
    if (n > s[kChunksTrain]) {
      throw ConfigError("[data] retro_index_ntrain: " + std::to_string(options.index_ntrain) +
                        " asks " + std::to_string(n) + " training chunks of " + blend.prefixes[d] +
                        ", which has " + std::to_string(s[kChunksTrain]) + " train chunks");
    }
    for (std::int64_t i = 0; i < n; ++i)
      rows.push_back(s[kFirstChunk] + i);
  }
  return rows;
}

std::unique_ptr<faiss::Index> make_index(const RetroDataOptions& options, std::int64_t hidden) {
  try {
    return std::unique_ptr<faiss::Index>(
        faiss::index_factory(static_cast<int>(hidden), options.index_str.c_str()));
  } catch (const faiss::FaissException& e) {
    throw ConfigError("[data] retro_index_str: Faiss's index factory cannot make '" +
                      options.index_str + "' for " + std::to_string(hidden) +
                      "-dimensional embeddings: " + e.what());
  }
}

void train_and_fill(faiss::Index& index, const RetroDataOptions& options, const Tensor& values,
                    const std::vector<std::int64_t>& train_rows, Logger& log) {
  const std::int64_t hidden = values.size(1), rows = values.size(0);
  std::vector<float> train(train_rows.size() * static_cast<std::size_t>(hidden));
  for (std::size_t i = 0; i < train_rows.size(); ++i)
    std::copy_n(values.data<float>() + train_rows[i] * hidden, hidden,
                train.data() + i * static_cast<std::size_t>(hidden));
  auto start = std::chrono::steady_clock::now();
  try {
    index.train(static_cast<faiss::Index::idx_t>(train_rows.size()), train.data());
  } catch (const faiss::FaissException& e) {
    throw ConfigError("[data] retro_index_ntrain: training '" + options.index_str + "' on " +
                      std::to_string(train_rows.size()) + " chunks failed: " + e.what());
  }
  const auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  log.info("retro index: trained '{}' on {} chunks in {:.1f} s", options.index_str,
           train_rows.size(), seconds());
  start = std::chrono::steady_clock::now();
  const std::int64_t step = std::max<std::int64_t>(1, options.block_size);
  for (std::int64_t first = 0; first < rows; first += step) {
    const std::int64_t n = std::min(step, rows - first);
    index.add(static_cast<faiss::Index::idx_t>(n), values.data<float>() + first * hidden);
    log.info("retro index: added chunks {}-{} of {} ({:.0f} chunks/s)", first, first + n, rows,
             static_cast<double>(first + n) / std::max(seconds(), 1e-9));
  }
}

}  // namespace

void build_index(const RetroDataOptions& options, ParallelState& parallel, Logger& log) {
  if (options.index_str.empty() || options.index_ntrain <= 0) {
    throw ConfigError(std::string("[data] ") +
                      (options.index_str.empty() ? "retro_index_str" : "retro_index_ntrain") +
                      ": `retro index` needs the Faiss index string (e.g. \"IVF4096,Flat\") and "
                      "the number of chunks to train it on");
  }
  const ChunkDb db = read_chunk_db(options);
  on_all_ranks(parallel, "index", [&] {
    if (parallel.world_rank() != 0) return;  // one index, built once
    const Embeddings embeddings = read_embeddings(options, db);
    const StageSettings settings = index_settings(embeddings.settings, options);
    if (stage_file_done(settings_file(options), settings)) {
      log.info("retro index: {} is complete for these settings; nothing to do",
               index_file(options).string());
      return;
    }
    const std::vector<std::int64_t> train_rows = sampled_rows(options, db);
    std::unique_ptr<faiss::Index> index = make_index(options, embeddings.values.size(1));
    train_and_fill(*index, options, embeddings.values, train_rows, log);
    fs::create_directories(index_file(options).parent_path());
    const fs::path partial = index_file(options).string() + ".partial";
    try {
      faiss::write_index(index.get(), partial.c_str());
    } catch (const faiss::FaissException& e) {
      throw Error("retro index: cannot write " + partial.string() + ": " + e.what());
    }
    fs::rename(partial, index_file(options));
    io::write_array_file(settings_file(options),
                         {{"ntotal", Tensor::from(std::vector<std::int64_t>{index->ntotal}, {1})}},
                         settings);
    log.info("retro index: {} chunks in {} ('{}')", index->ntotal, index_file(options).string(),
             options.index_str);
  });
}

RetroIndex read_index(const RetroDataOptions& options, const ChunkDb& db) {
  if (!fs::exists(settings_file(options))) {
    throw ConfigError("[data] retro_workdir: " + options.workdir.string() +
                      " has no index; run `megatron-app retro index` with this config first");
  }
  RetroIndex out;
  out.settings = io::read_array_attributes(settings_file(options));
  // This database's settings and this config's index settings; the embedder's are the index's.
  StageSettings expected = db.settings, recorded;
  expected["retro_index_str"] = options.index_str;
  expected["retro_index_ntrain"] = std::to_string(options.index_ntrain);
  for (const auto& [key, value] : expected) {
    const auto it = out.settings.find(key);
    recorded[key] = it == out.settings.end() ? "(not recorded)" : it->second;
  }
  check_settings(settings_file(options), recorded, expected);
  try {
    out.index.reset(faiss::read_index(index_file(options).c_str()));
  } catch (const faiss::FaissException& e) {
    throw Error("retro index: cannot read " + index_file(options).string() + ": " + e.what());
  }
  return out;
}

}  // namespace megatron::retro_data
