// Megatron's RetroDataset as a megatron::Dataset: the gpt dataset's samples, in the same order,
// with each sample's neighbour tokens; and the `retro` command that builds the retrieval pipeline
// in retro_workdir. Built so far: the chunk database (`retro build-db`). The neighbours (`retro
// query`, after `embed` and `index`) are not built yet, so build() refuses, saying so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpt_dataset.h"
#include "retro_options.h"

namespace megatron::retro_data {

class RetroDataset final : public Dataset {
 public:
  explicit RetroDataset(PluginContext& context);

  SampleSpec sample_fields() const override;
  void build(const std::array<std::int64_t, 3>& num_samples) override;
  std::int64_t size(data::Split split) const override { return gpt_.size(split); }
  std::int64_t seq_length() const override { return gpt_.seq_length(); }
  const Tokenizer& tokenizer() const override { return gpt_.tokenizer(); }
  void get(data::Split split, std::int64_t index, const SampleSlots& out) const override;
  std::vector<DatasetCommand> commands() override;

 private:
  int run_stage(const std::vector<std::string>& args, const CommandServices& services);

  Logger& log_;
  ParallelState& parallel_;
  RetroDataOptions options_;
  gpt_data::GptDataset gpt_;
};

}  // namespace megatron::retro_data
