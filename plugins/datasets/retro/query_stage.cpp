// The query stage: the samples' chunks embedded, searched, filtered by document and written per
// split in block files; and reading them back for training.
#include "query_stage.h"

#include <faiss/AutoTune.h>
#include <faiss/Index.h>
#include <faiss/impl/FaissException.h>

#include <algorithm>
#include <set>

#include "bert_embedder.h"
#include "index_stage.h"
#include "megatron/error.h"
#include "megatron/io/array_file.h"

namespace megatron::retro_data {

namespace {

namespace fs = std::filesystem;

fs::path split_dir(const RetroDataOptions& o, data::Split split) {
  return o.workdir / "query" / std::string(data::split_name(split));
}

// The split's samples, sequence length and seed: what its neighbours belong to.
StageSettings split_label(const RetroDataOptions& o, std::int64_t samples, data::Split split) {
  const std::string name(data::split_name(split));
  return {{"samples." + name, std::to_string(samples)},
          {"seq_length", std::to_string(o.gpt.seq_length)},
          {"training.seed", std::to_string(o.gpt.seed)}};
}

StageSettings query_settings(const StageSettings& index, const RetroDataOptions& o,
                             const StageSettings& label) {
  StageSettings s = index;
  s["retro_query_num_neighbors_query"] = std::to_string(o.query_neighbors_query);
  s["retro_query_num_neighbors_save"] = std::to_string(o.query_neighbors_save);
  s["retro_query_nprobe"] = std::to_string(o.query_nprobe);
  s["retro_query_ef_search"] = std::to_string(o.query_ef_search);
  s.insert(label.begin(), label.end());
  return s;
}

// nprobe and efSearch where the index has them (Megatron sets both on any index).
void set_search_parameters(faiss::Index& index, const RetroDataOptions& o, Logger& log) {
  faiss::ParameterSpace space;
  for (const auto& [name, value] :
       {std::pair{"nprobe", o.query_nprobe}, std::pair{"efSearch", o.query_ef_search}}) {
    try {
      space.set_index_parameter(&index, name, static_cast<double>(value));
    } catch (const faiss::FaissException&) {
      log.debug("retro query: the index has no {} parameter", name);
    }
  }
}

// The ids of the neighbours of `count` queries (count x searched), without those in `banned`
// (dataset, document) pairs of each query's sample, the first `save` kept, -1 padded.
std::vector<std::int64_t> filter_neighbors(
    const std::vector<faiss::Index::idx_t>& found, std::int64_t searched, std::int64_t save,
    const ChunkDb& db, const std::vector<std::set<std::pair<std::int64_t, std::int64_t>>>& banned) {
  const std::int64_t* chunks = db.chunks.data<std::int64_t>();
  std::vector<std::int64_t> out(banned.size() * static_cast<std::size_t>(save), -1);
  for (std::size_t q = 0; q < banned.size(); ++q) {
    std::int64_t kept = 0;
    for (std::int64_t i = 0; i < searched && kept < save; ++i) {
      const auto id = static_cast<std::int64_t>(
          found[q * static_cast<std::size_t>(searched) + static_cast<std::size_t>(i)]);
      if (id < 0) continue;
      const std::int64_t* row = chunks + id * kChunkColumns;
      if (banned[q].count({row[kDatasetIndex], row[kDocId]})) continue;
      out[q * static_cast<std::size_t>(save) + static_cast<std::size_t>(kept++)] = id;
    }
  }
  return out;
}

struct QueryContext {
  const RetroDataOptions& options;
  const gpt_data::GptDataset& gpt;
  const ChunkDb& db;
  faiss::Index& index;
  const BertEmbedder& bert;
  const Tokenizer& gpt_tokens;
  std::int64_t chunks_per_sample;
};

// Chunks [first, last) of a split: their neighbours, (last - first) x save.
std::vector<std::int64_t> query_block(const QueryContext& q, data::Split split, std::int64_t first,
                                      std::int64_t last) {
  const std::int64_t m = q.options.chunk_length, l = q.chunks_per_sample;
  const SampleSpec spec = q.gpt.sample_fields();
  Batch sample = Batch::allocate(spec, 1);
  std::int64_t loaded = -1;
  std::vector<std::string> texts;
  std::vector<std::set<std::pair<std::int64_t, std::int64_t>>> banned;
  std::set<std::pair<std::int64_t, std::int64_t>> sample_docs;
  for (std::int64_t chunk = first; chunk < last; ++chunk) {
    const std::int64_t s = chunk / l, c = chunk % l;
    if (s != loaded) {
      q.gpt.get(split, s, sample.sample(0));
      const gpt_data::GptDataset::SampleSource source = q.gpt.sample_source(split, s);
      const auto at = std::find(q.db.prefixes.begin(), q.db.prefixes.end(), source.prefix);
      const auto dataset = static_cast<std::int64_t>(at - q.db.prefixes.begin());
      sample_docs.clear();
      for (const std::int64_t doc : source.sequence_ids)
        sample_docs.insert({dataset, doc});
      loaded = s;
    }
    const std::int32_t* tokens = sample["tokens"].data<std::int32_t>();
    texts.push_back(
        q.gpt_tokens.decode(std::span<const TokenId>(tokens + c * m, static_cast<std::size_t>(m))));
    banned.push_back(sample_docs);
  }
  const std::int64_t searched = q.options.query_neighbors_query;
  std::vector<float> distances(texts.size() * static_cast<std::size_t>(searched));
  std::vector<faiss::Index::idx_t> found(distances.size());
  for (std::size_t i = 0; i < texts.size();
       i += static_cast<std::size_t>(q.options.bert_batch_size)) {
    const std::size_t end =
        std::min(texts.size(), i + static_cast<std::size_t>(q.options.bert_batch_size));
    const Tensor x = q.bert.embed({texts.begin() + static_cast<std::ptrdiff_t>(i),
                                   texts.begin() + static_cast<std::ptrdiff_t>(end)});
    q.index.search(static_cast<faiss::Index::idx_t>(end - i), x.data<float>(), searched,
                   distances.data() + i * static_cast<std::size_t>(searched),
                   found.data() + i * static_cast<std::size_t>(searched));
  }
  return filter_neighbors(found, searched, q.options.query_neighbors_save, q.db, banned);
}

std::vector<std::pair<std::int64_t, fs::path>> block_files(const RetroDataOptions& o,
                                                           data::Split split, std::int64_t chunks) {
  std::vector<std::pair<std::int64_t, fs::path>> files;
  for (std::int64_t first = 0; first < chunks; first += o.block_size) {
    const std::int64_t last = std::min(chunks, first + o.block_size);
    files.push_back({first, split_dir(o, split) /
                                (std::to_string(first) + "-" + std::to_string(last) + ".h5")});
  }
  return files;
}

}  // namespace

std::int64_t chunks_per_sample(const RetroDataOptions& o) {
  if (o.gpt.seq_length % o.chunk_length != 0) {
    throw ConfigError("[data] retro_chunk_length: " + std::to_string(o.chunk_length) +
                      " does not divide seq_length " + std::to_string(o.gpt.seq_length) +
                      " (Retro cuts each sample into whole chunks)");
  }
  return o.gpt.seq_length / o.chunk_length;
}

std::int64_t queried_samples(const gpt_data::GptDataset& gpt, data::Split split,
                             const std::array<std::int64_t, 3>& wanted) {
  return std::min(gpt.size(split), wanted[static_cast<std::size_t>(split)]);
}

void query_neighbors(const RetroDataOptions& options, const gpt_data::GptDataset& gpt,
                     const std::array<std::int64_t, 3>& wanted, const CommandServices& services,
                     ParallelState& parallel, Logger& log) {
  const std::int64_t l = chunks_per_sample(options);
  const ChunkDb db = read_chunk_db(options);
  if (options.bert_load.empty()) {
    throw ConfigError(
        "[data] retro_bert_load: `retro query` embeds the samples' chunks with the "
        "BERT checkpoint the database was embedded with; name it");
  }
  RetroIndex index = read_index(options, db);
  const auto bert_tokens =
      make_tokenizer(options.bert_tokenizer_type, options.bert_tokenizer_files);
  const auto gpt_tokens = make_tokenizer(options.gpt.tokenizer_type, options.gpt.tokenizer_files);
  const BertEmbedder bert(options.bert_load, *bert_tokens, options.bert_max_chunk_length, services,
                          parallel, log);
  if (bert.hidden_size() != index.index->d) {
    throw ConfigError("[data] retro_bert_load: " + bert.identity() + " has hidden size " +
                      std::to_string(bert.hidden_size()) + ", the index holds " +
                      std::to_string(index.index->d) + "-dimensional embeddings");
  }
  if (index.settings["retro_bert_load"] != bert.identity()) {
    throw ConfigError("[data] retro_bert_load: the index holds embeddings of " +
                      index.settings["retro_bert_load"] + ", the config names " + bert.identity());
  }
  set_search_parameters(*index.index, options, log);
  const QueryContext context{options, gpt, db, *index.index, bert, *gpt_tokens, l};
  for (const data::Split split : data::kSplits) {
    const std::int64_t samples = queried_samples(gpt, split, wanted), chunks = samples * l;
    if (chunks == 0) continue;
    const StageSettings settings =
        query_settings(index.settings, options, split_label(options, samples, split));
    const auto blocks = block_files(options, split, chunks);
    std::vector<fs::path> files;
    for (const auto& block : blocks)
      files.push_back(block.second);
    make_own_blocks(parallel, "query", files, settings, log, [&](std::size_t b) {
      const std::int64_t first = blocks[b].first;
      const std::int64_t last = std::min(chunks, first + options.block_size);
      const std::vector<std::int64_t> neighbors = query_block(context, split, first, last);
      io::write_array_file(
          blocks[b].second,
          {{"neighbors", Tensor::from(neighbors, {last - first, options.query_neighbors_save})}},
          settings);
      return BlockWork{std::string(data::split_name(split)) + " chunks " + std::to_string(first) +
                           "-" + std::to_string(last),
                       static_cast<double>(last - first), "chunks"};
    });
  }
}

Tensor read_neighbors(const RetroDataOptions& options, const gpt_data::GptDataset& gpt,
                      const std::array<std::int64_t, 3>& wanted, const ChunkDb& db,
                      data::Split split) {
  const std::int64_t l = chunks_per_sample(options);
  const std::int64_t samples = queried_samples(gpt, split, wanted);
  std::vector<std::pair<std::int64_t, fs::path>> files;
  if (fs::is_directory(split_dir(options, split))) {
    for (const auto& entry : fs::directory_iterator(split_dir(options, split))) {
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() != ".h5") continue;
      files.push_back({std::stoll(name.substr(0, name.find('-'))), entry.path()});
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    throw ConfigError("[data] retro_workdir: " + options.workdir.string() + " has no " +
                      std::string(data::split_name(split)) +
                      " neighbours; run `megatron-app retro query` with this config first");
  }
  StageSettings expected = db.settings;
  expected["retro_index_str"] = options.index_str;
  expected["retro_index_ntrain"] = std::to_string(options.index_ntrain);
  StageSettings label = split_label(options, samples, split);
  if (!options.verify_neighbor_count)
    label.erase("samples." + std::string(data::split_name(split)));
  expected.insert(label.begin(), label.end());
  std::vector<std::int64_t> all;
  std::int64_t save = 0;
  for (const auto& [first, file] : files) {
    const StageSettings stored = io::read_array_attributes(file);
    StageSettings recorded;
    for (const auto& [key, value] : expected) {
      const auto it = stored.find(key);
      recorded[key] = it == stored.end() ? "(not recorded)" : it->second;
    }
    check_settings(file, recorded, expected);
    if (first != static_cast<std::int64_t>(all.size()) / std::max<std::int64_t>(save, 1) &&
        save > 0) {
      throw ConfigError("[data] retro_workdir: " + file.string() +
                        " does not follow the blocks before it; run `megatron-app retro query`");
    }
    const Tensor n = io::read_array(file, "neighbors");
    save = n.size(1);
    all.insert(all.end(), n.data<std::int64_t>(), n.data<std::int64_t>() + n.numel());
  }
  const auto rows = static_cast<std::int64_t>(all.size()) / save;
  if (save < options.num_neighbors) {
    throw ConfigError("[data] retro_num_neighbors: " + std::to_string(options.num_neighbors) +
                      " neighbours per chunk, but only " + std::to_string(save) +
                      " were saved (retro_query_num_neighbors_save)");
  }
  if (rows % l != 0 || (options.verify_neighbor_count && rows != samples * l)) {
    throw ConfigError("[data] retro_verify_neighbor_count: the " +
                      std::string(data::split_name(split)) + " neighbours cover " +
                      std::to_string(rows) + " chunks, training reads " +
                      std::to_string(samples * l) +
                      "; run `megatron-app retro query` again (or set it false to reuse them)");
  }
  return Tensor::from(all, {rows, save});
}

}  // namespace megatron::retro_data
