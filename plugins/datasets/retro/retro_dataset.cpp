// The retro dataset's samples and its `retro` command (the pipeline's stages).
#include "retro_dataset.h"

#include <iostream>

#include "chunk_db.h"
#include "embed_stage.h"
#include "index_stage.h"
#include "megatron/error.h"

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
    "             embeddings, holding every chunk\n";

}  // namespace

RetroDataset::RetroDataset(PluginContext& context)
    : log_(context.log),
      parallel_(context.parallel),
      options_(read_retro_data_options(context.config, context.core)),
      gpt_(context) {}

SampleSpec RetroDataset::sample_fields() const {
  SampleSpec fields = gpt_.sample_fields();
  const std::int64_t l =
      (options_.gpt.seq_length + options_.chunk_length - 1) / options_.chunk_length;
  fields.push_back(
      {"neighbor_tokens",
       DType::i32,
       {l, options_.num_neighbors, options_.num_retrieved_chunks * options_.chunk_length},
       FieldKind::token_ids});
  return fields;
}

void RetroDataset::build(const std::array<std::int64_t, 3>& num_samples) {
  read_chunk_db(options_);  // refuses a missing or mismatched database first
  (void)num_samples;
  throw ConfigError("[data] retro_workdir: " + options_.workdir.string() +
                    " has a chunk database but no neighbours: the stages that make them "
                    "(`retro embed`, `retro index`, `retro query`) are not built yet");
}

void RetroDataset::get(data::Split, std::int64_t, const SampleSlots&) const {
  throw Error("retro dataset: get() before a successful build()");
}

std::vector<DatasetCommand> RetroDataset::commands() {
  return {{"retro", "build Retro's retrieval pipeline (build-db ...) in retro_workdir",
           [this](const std::vector<std::string>& args, const CommandServices& services) {
             return run_stage(args, services);
           }}};
}

int RetroDataset::run_stage(const std::vector<std::string>& args, const CommandServices& services) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    if (parallel_.world_rank() == 0) std::cout << kStages;
    return args.empty() ? 2 : 0;
  }
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
  throw UsageError("megatron-app retro: unknown stage '" + args[0] +
                   "' (stages: build-db, embed, index)");
}

}  // namespace megatron::retro_data
