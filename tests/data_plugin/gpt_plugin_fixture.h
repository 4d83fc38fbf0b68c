// Helpers for the `gpt` dataset plugin tests: scratch datasets written with the core writer, and
// the plugin created through the catalog from the built plugin directory, with its log captured.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>
#include "common/scratch_dir.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include "megatron/config/config.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/dataset.h"
#include "megatron/parallel/mpi_runtime.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/plugin/catalog.h"

namespace megatron::test {

inline constexpr std::int32_t kEod = 50256;  // GPT-2's <|endoftext|>
inline const std::string kVocabFile = std::string(DATA_DIR) + "/encoder.json";
inline const std::string kMergeFile = std::string(DATA_DIR) + "/vocab.bpe";

using ScratchDir = megatron::testing::ScratchDir;

// Writes `documents` documents (one sequence each, as preprocess without sentence splitting) of
// random lengths in [min_length, max_length], tokens drawn from [first_token, first_token + 900)
// and EOD last. Returns the prefix.
inline std::string write_dataset(const std::string& prefix, int documents, int min_length,
                                 int max_length, std::int32_t first_token, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> length(min_length, max_length);
  std::uniform_int_distribution<std::int32_t> token(first_token, first_token + 899);
  IndexedDatasetWriter writer(bin_path(prefix), IndexDType::u16);
  for (int d = 0; d < documents; ++d) {
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(length(rng)));
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i)
      tokens[i] = token(rng);
    tokens.back() = kEod;
    const std::vector<std::int64_t> lengths = {static_cast<std::int64_t>(tokens.size())};
    writer.add_document(tokens, lengths);
  }
  writer.finalize(idx_path(prefix));
  return prefix;
}

// A TOML string literal.
inline std::string quoted(const std::string& text) {
  return "\"" + text + "\"";
}

// The [data] table of a gpt dataset over `data_path` (a TOML value), plus `extra` lines.
inline std::string gpt_table(const std::string& data_path, int seq_length,
                             const std::string& extra = "") {
  return "[data]\ntype = \"gpt\"\ndata_path = " + data_path +
         "\nseq_length = " + std::to_string(seq_length) + "\nvocab_file = " + quoted(kVocabFile) +
         "\nmerge_file = " + quoted(kMergeFile) + "\n" + extra;
}

// Creates the built `gpt` plugin through the catalog, as the host does.
class GptPluginTest : public ::testing::Test {
 protected:
  // Validates `toml` (a whole config) and creates the plugin; the config lives in the fixture.
  std::unique_ptr<Dataset> create(const std::string& toml) {
    config_ = std::make_unique<config::Config>(config::Config::from_raw(
        config::RawConfig::load_string(toml, (dir_.path() / "test.toml").string())));
    const PluginRecord* record = catalog_.find(PluginKind::dataset, "gpt");
    if (!record) throw std::runtime_error("no gpt dataset plugin in " BUILTIN_PLUGIN_DIR);
    const config::ConfigTable& table =
        config_->validate_plugin_table(catalog_.config_schema(*record));
    PluginContext context{*log_, parallel_, table, config_->core()};
    std::unique_ptr<Plugin> object = catalog_.create(*record, context);
    auto* dataset = dynamic_cast<Dataset*>(object.get());
    if (!dataset) throw std::runtime_error("the gpt plugin is not a megatron::Dataset");
    object.release();
    return std::unique_ptr<Dataset>(dataset);
  }

  // The log since the last call.
  std::string take_log() {
    log_->flush();
    std::string text = log_text_.str();
    log_text_.str("");
    return text;
  }

  ScratchDir dir_;
  std::ostringstream log_text_;
  std::shared_ptr<Logger> log_ = std::make_shared<Logger>(
      "gpt-plugin-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text_));
  MpiRuntime runtime_{MpiRuntime::Mode::single_process};
  ParallelState parallel_ = ParallelState::create(runtime_, ParallelSizes{});
  PluginCatalog catalog_ = PluginCatalog::scan({{BUILTIN_PLUGIN_DIR, "[plugins] paths", true}});
  std::unique_ptr<config::Config> config_;
};

// One sample as the plugin serves it.
struct Sample {
  std::vector<std::int32_t> tokens, labels;
  std::vector<float> loss_mask;
};

// The elements of a batch's field `name` (one sample of `length` elements).
template <typename T>
std::vector<T> field_values(const Batch& batch, const std::string& name, std::int64_t length) {
  const Tensor& t = batch[name];
  EXPECT_EQ(t.shape(), (Shape{1, length})) << name;
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

inline Sample get_sample(const Dataset& dataset, data::Split split, std::int64_t index) {
  Batch batch = Batch::allocate(dataset.sample_fields(), 1);
  dataset.get(split, index, batch.sample(0));
  const std::int64_t n = dataset.seq_length();
  return {field_values<std::int32_t>(batch, "tokens", n),
          field_values<std::int32_t>(batch, "labels", n),
          field_values<float>(batch, "loss_mask", n)};
}

}  // namespace megatron::test
