// The interface of dataset plugins: train/valid/test samples made of named fields that the
// plugin declares (GPT: tokens, labels, loss_mask; BERT: text, types, labels, ...), and the
// tokenizer they were made with.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "megatron/batch.h"
#include "megatron/data/split.h"
#include "megatron/plugin.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron {

class Model;

// What the host lends a dataset command.
struct CommandServices {
  // The model plugin a whole config's [model] table selects (e.g. the config a checkpoint was
  // saved with), created through the host's plugin catalog with the command's parallel state and
  // logger, not built. `origin` names the config in errors. Throws ConfigError / PluginError.
  std::function<std::unique_ptr<Model>(const std::string& config_toml, const std::string& origin)>
      create_model;
};

// A command a dataset plugin adds to megatron-app: `megatron-app NAME ARGS... --config FILE`
// runs it on every rank with the plugin the config's [data] table selects, created but not
// built (Retro's `retro build-db`, `retro embed`...). `run` gets the words after NAME other than
// the host's own options (--config, --set, --log-level) and returns the exit code; it throws
// UsageError / ConfigError / Error as the host's commands do.
struct DatasetCommand {
  std::string name;
  std::string summary;
  std::function<int(const std::vector<std::string>& args, const CommandServices& services)> run;
};

class Dataset : public Plugin {
 public:
  ~Dataset() override;
  // The fields every sample has, with per-sample shapes. Known once the plugin is created (before
  // build), so the host can check them against the model's inputs before any work.
  virtual SampleSpec sample_fields() const = 0;
  // Builds the splits so each has at least `num_samples[split]` samples (Megatron's
  // train_val_test_num_samples; 0 = the split is not used).
  virtual void build(const std::array<std::int64_t, 3>& num_samples) = 0;
  virtual std::int64_t size(data::Split split) const = 0;
  // The sequence length of the samples (the model's positions).
  virtual std::int64_t seq_length() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  // Fills every field of sample `index` of `split` into `out` (slots laid out by sample_fields()).
  // Thread-safe.
  virtual void get(data::Split split, std::int64_t index, const SampleSlots& out) const = 0;
  // The commands this plugin adds (API 6); none by default.
  virtual std::vector<DatasetCommand> commands() { return {}; }
};

}  // namespace megatron
