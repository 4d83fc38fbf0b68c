// The retro dataset's samples and its `retro` command (the pipeline's stages).
#include "retro_dataset.h"

#include <iostream>

#include "chunk_db.h"
#include "embed_stage.h"
#include "index_stage.h"
#include "megatron/error.h"
#include "megatron/train/batch_schedule.h"
#include "megatron/train/sample_counts.h"
#include "query_stage.h"

namespace megatron::retro_data {

namespace {

constexpr const char* kStages =
    "usage: megatron-app retro STAGE --config FILE [--set data.KEY=VALUE ...]\n"
    "Builds Retro's retrieval pipeline in the [data] table's retro_workdir (type = \"retro\").\n"
    "Each stage resumes where an interrupted run stopped and refuses a workdir built from other\n"
    "data or settings, naming the difference.\n\n"
    "stages:\n"
    "  build-db   the chunk database: each document cut into retro_chunk_length GPT tokens,\n"
    "             re-tokenized with BERT WordPiece (empty ones dropped); Megatron's train DB\n"
    "  embed      each chunk's BERT embedding (retro_bert_load): the mean of the final hidden\n"
    "             states between [CLS] and [SEP], as Megatron's --output-bert-embeddings\n"
    "  index      a Faiss index (retro_index_str) trained on retro_index_ntrain chunks'\n"
    "             embeddings, holding every chunk\n"
    "  query      every train/valid/test sample chunk's neighbours (those of the sample's own\n"
    "             documents removed), for the samples this config's training reads\n"
    "  inspect    a sample's chunks with their neighbours as text ([--split S] [--sample N]\n"
    "             [--chunk C]; `megatron-app retro inspect --help`)\n";

}  // namespace

RetroDataset::RetroDataset(PluginContext& context)
    : log_(context.log),
      parallel_(context.parallel),
      core_(context.core),
      options_(read_retro_data_options(context.config, context.core)),
      gpt_(context) {}

SampleSpec retro_sample_fields(const RetroDataOptions& options) {
  SampleSpec fields = gpt_data::gpt_sample_fields(options.gpt);
  fields.push_back({"neighbor_tokens",
                    DType::i32,
                    {chunks_per_sample(options), options.num_neighbors,
                     options.num_retrieved_chunks * options.chunk_length},
                    FieldKind::token_ids});
  return fields;
}

SampleSpec RetroDataset::sample_fields() const {
  return retro_sample_fields(options_);
}

std::array<std::int64_t, 3> RetroDataset::wanted_samples() const {
  const train::BatchSchedule batches =
      train::BatchSchedule::from_config(core_.training, parallel_.dp_size());
  return train::train_valid_test_num_samples(core_.training, batches.global_batch_size());
}

void RetroDataset::build(const std::array<std::int64_t, 3>& num_samples) {
  gpt_.build(num_samples);
  db_ = read_chunk_db(options_);
  db_data_.clear();
  for (const std::string& prefix : db_.prefixes)
    db_data_.push_back(std::make_unique<IndexedDataset>(prefix));
  for (const data::Split split : data::kSplits) {
    const auto at = static_cast<std::size_t>(split);
    neighbors_[at] = queried_samples(gpt_, split, num_samples) > 0
                         ? read_neighbors(options_, gpt_, num_samples, db_, split)
                         : Tensor{};
  }
}

void RetroDataset::get(data::Split split, std::int64_t index, const SampleSlots& out) const {
  gpt_.get(split, index, out);
  const Tensor& neighbors = neighbors_[static_cast<std::size_t>(split)];
  if (!neighbors.defined()) throw Error("retro dataset: get() before a successful build()");
  const std::int64_t l = chunks_per_sample(options_), k = options_.num_neighbors;
  const std::int64_t m = options_.chunk_length, pieces = options_.num_retrieved_chunks;
  const std::int64_t save = neighbors.size(1), rows = db_.chunks.size(0);
  const std::int64_t sample = index % (neighbors.size(0) / l);  // Megatron wraps
  const std::span<std::int32_t> tokens = out.i32("neighbor_tokens");
  const std::int32_t eod = gpt_.tokenizer().eod();
  std::fill(tokens.begin(), tokens.end(), eod);
  const std::int64_t* chunks = db_.chunks.data<std::int64_t>();
  for (std::int64_t c = 0; c < l; ++c) {
    const std::int64_t* row = neighbors.data<std::int64_t>() + (sample * l + c) * save;
    for (std::int64_t j = 0; j < k; ++j) {
      for (std::int64_t p = 0; p < pieces; ++p) {
        const std::int64_t id = ((row[j] + p) % rows + rows) % rows;
        const std::int64_t* chunk = chunks + id * kChunkColumns;
        const std::int64_t length = chunk[kTokenEnd] - chunk[kTokenStart];
        db_data_[static_cast<std::size_t>(chunk[kDatasetIndex])]->read(
            static_cast<std::size_t>(chunk[kDocId]), static_cast<std::size_t>(chunk[kTokenStart]),
            tokens.subspan(static_cast<std::size_t>(((c * k + j) * pieces + p) * m),
                           static_cast<std::size_t>(length)));
      }
    }
  }
}

std::vector<DatasetCommand> RetroDataset::commands() {
  return {{"retro", "build Retro's retrieval pipeline in retro_workdir and inspect its neighbours",
           [this](const std::vector<std::string>& args, const CommandServices& services) {
             return run_stage(args, services);
           }}};
}

int RetroDataset::run_stage(const std::vector<std::string>& args, const CommandServices& services) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    if (parallel_.world_rank() == 0) std::cout << kStages;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "inspect") return inspect(args);
  if (args.size() > 1) {
    throw UsageError("megatron-app retro " + args[0] + ": unexpected argument '" + args[1] + "'");
  }
  if (args[0] == "build-db") {
    build_chunk_db(options_, parallel_, log_);
    return 0;
  }
  if (args[0] == "embed") {
    embed_chunks(options_, services, parallel_, log_);
    return 0;
  }
  if (args[0] == "index") {
    build_index(options_, parallel_, log_);
    return 0;
  }
  if (args[0] == "query") {
    const std::array<std::int64_t, 3> wanted = wanted_samples();
    gpt_.build(wanted);
    query_neighbors(options_, gpt_, wanted, services, parallel_, log_);
    return 0;
  }
  throw UsageError("megatron-app retro: unknown stage '" + args[0] +
                   "' (stages: build-db, embed, index, query, inspect)");
}

}  // namespace megatron::retro_data
