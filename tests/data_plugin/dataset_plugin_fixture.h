// A dataset plugin (gpt, bert, ...) created through the catalog from the built plugin directory,
// as the host creates it, with its log captured; shared by the dataset plugin tests.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include "common/scratch_dir.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include "megatron/batch.h"
#include "megatron/config/config.h"
#include "megatron/dataset.h"
#include "megatron/error.h"
#include "megatron/parallel/mpi_runtime.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/plugin/catalog.h"

namespace megatron::test {

using ScratchDir = megatron::testing::ScratchDir;

// A TOML string literal.
inline std::string quoted(const std::string& text) {
  return "\"" + text + "\"";
}

class DatasetPluginTest : public ::testing::Test {
 protected:
  explicit DatasetPluginTest(std::string type) : type_(std::move(type)) {}

  // Validates `toml` (a whole config) and creates the plugin; the config lives in the fixture.
  std::unique_ptr<Dataset> create(const std::string& toml) {
    config_ = std::make_unique<config::Config>(config::Config::from_raw(
        config::RawConfig::load_string(toml, (dir_.path() / "test.toml").string())));
    const PluginRecord* record = catalog_.find(PluginKind::dataset, type_);
    if (!record) throw std::runtime_error("no " + type_ + " dataset plugin in " BUILTIN_PLUGIN_DIR);
    const config::ConfigTable& table =
        config_->validate_plugin_table(catalog_.config_schema(*record));
    PluginContext context{*log_, parallel_, table, config_->core()};
    std::unique_ptr<Plugin> object = catalog_.create(*record, context);
    auto* dataset = dynamic_cast<Dataset*>(object.get());
    if (!dataset) throw std::runtime_error("the " + type_ + " plugin is not a megatron::Dataset");
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

  std::string type_;
  ScratchDir dir_;
  std::ostringstream log_text_;
  std::shared_ptr<Logger> log_ = std::make_shared<Logger>(
      type_ + "-plugin-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text_));
  MpiRuntime runtime_{MpiRuntime::Mode::single_process};
  ParallelState parallel_ = ParallelState::create(runtime_, ParallelSizes{});
  PluginCatalog catalog_ = PluginCatalog::scan({{BUILTIN_PLUGIN_DIR, "[plugins] paths", true}});
  std::unique_ptr<config::Config> config_;
};

// The elements of a batch's field `name` (one sample of `length` elements; 0: a scalar field).
template <typename T>
std::vector<T> field_values(const Batch& batch, const std::string& name, std::int64_t length) {
  const Tensor& t = batch[name];
  EXPECT_EQ(t.shape(), (length > 0 ? Shape{1, length} : Shape{1})) << name;
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// Expects every one of `parts` in an error message.
inline void expect_mentions(const std::string& text, std::initializer_list<std::string> parts) {
  for (const auto& p : parts)
    EXPECT_NE(text.find(p), std::string::npos) << "message:\n  " << text << "\nlacks: " << p;
}

// The message of the megatron::Error `action` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace megatron::test
