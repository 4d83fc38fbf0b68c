// Megatron's RetroDataset as a megatron::Dataset: the gpt dataset's samples, in the same order,
// each with its neighbour tokens; and the `retro` command that builds the retrieval pipeline in
// retro_workdir (build-db, embed, index, query) and shows what it retrieved (inspect).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "chunk_db.h"
#include "gpt_dataset.h"
#include "megatron/data/indexed_dataset.h"
#include "retro_options.h"

namespace megatron::retro_data {

// The gpt dataset's fields and neighbor_tokens (l chunks, k neighbours, r tokens each), from the
// options alone (also `plan`'s answer).
SampleSpec retro_sample_fields(const RetroDataOptions& options);

class RetroDataset final : public Dataset {
 public:
  explicit RetroDataset(PluginContext& context);

  SampleSpec sample_fields() const override;
  // The gpt dataset's splits, then each split's neighbours from the workdir (ConfigError naming
  // the stage to run or the difference when they are missing or made for other data).
  void build(const std::array<std::int64_t, 3>& num_samples) override;
  std::int64_t size(data::Split split) const override { return gpt_.size(split); }
  std::int64_t seq_length() const override { return gpt_.seq_length(); }
  const Tokenizer& tokenizer() const override { return gpt_.tokenizer(); }
  // The gpt sample, and neighbor_tokens (l, k, r): for chunk c, neighbour j (the j-th saved one of
  // sample index modulo the queried samples), database chunks n, n + 1, ... (Megatron's
  // continuation, modulo the database; a -1 pad is the last chunk, as Python's modulo makes it),
  // each padded with end-of-document tokens to retro_chunk_length.
  void get(data::Split split, std::int64_t index, const SampleSlots& out) const override;
  std::vector<DatasetCommand> commands() override;

 private:
  int run_stage(const std::vector<std::string>& args, const CommandServices& services);
  // `retro inspect [--split S] [--sample N] [--chunk C]` (retro_inspect.cpp).
  int inspect(const std::vector<std::string>& args);
  // The samples each split is built with for this config's training (as `megatron-app data`).
  std::array<std::int64_t, 3> wanted_samples() const;

  Logger& log_;
  ParallelState& parallel_;
  const config::CoreConfig& core_;
  RetroDataOptions options_;
  gpt_data::GptDataset gpt_;
  // After build(): the database, its token files and each split's neighbours.
  ChunkDb db_;
  std::vector<std::unique_ptr<IndexedDataset>> db_data_;
  std::array<Tensor, 3> neighbors_;
};

}  // namespace megatron::retro_data
