// Plugin discovery and refusal: every bad plugin is refused with its file and reason, good ones
// load, and a loaded task plugin runs with injected services.
#include <gtest/gtest.h>

#include "megatron/config/config.h"
#include "megatron/error.h"
#include "megatron/parallel/mpi_runtime.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/plugin/catalog.h"
#include "megatron/task.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = FIXTURE_ROOT;

PluginCatalog scan_dirs(std::initializer_list<const char*> dirs) {
  std::vector<PluginSearchEntry> path;
  for (const char* d : dirs)
    path.push_back({kFixtures / d, "[plugins] paths", true});
  return PluginCatalog::scan(path);
}

void expect_contains(const std::string& text, std::initializer_list<std::string> parts) {
  for (const auto& p : parts) {
    EXPECT_NE(text.find(p), std::string::npos) << "message:\n  " << text << "\nlacks: " << p;
  }
}

// The single problem a scan of `dir` reports.
std::string only_problem(const char* dir) {
  const PluginCatalog catalog = scan_dirs({dir});
  EXPECT_TRUE(catalog.plugins().empty());
  EXPECT_EQ(catalog.problems().size(), 1u);
  return catalog.problems().empty() ? std::string() : catalog.problems()[0].message();
}

TEST(PluginCatalog, GoodPluginIsFoundWithItsDescriptor) {
  const PluginCatalog catalog = scan_dirs({"good"});
  ASSERT_TRUE(catalog.problems().empty()) << catalog.problems()[0].message();
  ASSERT_EQ(catalog.plugins().size(), 1u);
  const PluginRecord& p = catalog.plugins()[0];
  EXPECT_EQ(p.kind, PluginKind::task);
  EXPECT_EQ(p.name, "fixture_echo");
  EXPECT_EQ(p.version, "0.0.1");
  EXPECT_EQ(p.api_major, kApiMajor);
  EXPECT_EQ(p.file.filename(), "libfixture_good.so");
  EXPECT_EQ(catalog.find(PluginKind::task, "fixture_echo"), &p);
  EXPECT_EQ(catalog.find(PluginKind::model, "fixture_echo"), nullptr);
}

TEST(PluginCatalog, WrongApiMajorIsRefusedNamingBothVersions) {
  expect_contains(only_problem("wrong_major"),
                  {"libfixture_wrong_major.so", "built for SDK API 8.0",
                   "this host provides API 7.0", "major versions must be equal"});
}

TEST(PluginCatalog, NewerApiMinorIsRefused) {
  expect_contains(only_problem("newer_minor"),
                  {"libfixture_newer_minor.so", "SDK API 7.1, newer than this host's API 7.0"});
}

TEST(PluginCatalog, AbiMismatchIsRefused) {
  expect_contains(only_problem("abi_mismatch"),
                  {"libfixture_abi.so", "ABI tag 'msvc19/other' differs from the host's"});
}

TEST(PluginCatalog, MissingExportSymbolIsRefusedBeforeLoading) {
  expect_contains(only_problem("no_export"),
                  {"libfixture_no_export.so", "does not export the symbol 'megatron_plugin'",
                   "MEGATRON_PLUGIN"});
}

TEST(PluginCatalog, FileThatIsNotASharedLibraryIsRefused) {
  expect_contains(only_problem("not_a_library"), {"libtext.so", "is not a shared library"});
}

TEST(PluginCatalog, InvalidNameIsRefused) {
  expect_contains(only_problem("bad_name"), {"'Bad Name!' is not a valid plugin name"});
}

TEST(PluginCatalog, DuplicateKindAndNameNamesBothFiles) {
  const PluginCatalog catalog = scan_dirs({"duplicate"});
  ASSERT_EQ(catalog.plugins().size(), 1u);
  ASSERT_EQ(catalog.problems().size(), 1u);
  expect_contains(catalog.problems()[0].message(),
                  {"libfixture_dup_b.so", "second task plugin named 'fixture_echo'",
                   "libfixture_dup_a.so already provides it"});
}

TEST(PluginCatalog, DuplicateAcrossDirectoriesIsRefusedToo) {
  const PluginCatalog catalog = scan_dirs({"good", "duplicate"});
  EXPECT_EQ(catalog.problems().size(), 2u);
  expect_contains(catalog.problems()[0].message(), {"libfixture_good.so already provides it"});
}

TEST(PluginCatalog, SameFileReachedTwiceIsNotADuplicate) {
  std::vector<PluginSearchEntry> path = {
      {kFixtures / "good", "[plugins] paths", true},
      {kFixtures / "good" / "libfixture_good.so", "MEGATRON_PLUGIN_PATH", true}};
  const PluginCatalog catalog = PluginCatalog::scan(path);
  EXPECT_TRUE(catalog.problems().empty());
  EXPECT_EQ(catalog.plugins().size(), 1u);
}

TEST(PluginCatalog, MissingSearchDirectoryIsReportedUnlessItIsTheInstalledOne) {
  const PluginCatalog catalog =
      PluginCatalog::scan({{"/nonexistent/plugins", "MEGATRON_PLUGIN_PATH", true},
                           {"/nonexistent/installed", "installed", false}});
  ASSERT_EQ(catalog.problems().size(), 1u);
  expect_contains(catalog.problems()[0].message(),
                  {"/nonexistent/plugins", "does not exist (listed in MEGATRON_PLUGIN_PATH)"});
}

TEST(PluginCatalog, ThrowIfProblemsListsEveryProblem) {
  const PluginCatalog catalog = scan_dirs({"wrong_major", "not_a_library"});
  try {
    catalog.throw_if_problems();
    FAIL() << "expected a PluginError";
  } catch (const PluginError& e) {
    expect_contains(e.what(), {"2 plugins were refused", "wrong_major", "libtext.so"});
  }
}

TEST(PluginCatalog, SearchPathOrderIsConfigThenEnvironmentThenInstalled) {
  const auto path = plugin_search_path({"/cfg/a"}, "/env/b::/env/c", "/opt/megatron/bin");
  ASSERT_EQ(path.size(), 4u);
  EXPECT_EQ(path[0].path, "/cfg/a");
  EXPECT_EQ(path[0].origin, "[plugins] paths");
  EXPECT_EQ(path[1].path, "/env/b");
  EXPECT_EQ(path[2].path, "/env/c");
  EXPECT_EQ(path[2].origin, "MEGATRON_PLUGIN_PATH");
  EXPECT_EQ(path[3].path, "/opt/megatron/lib/megatron/plugins");
  EXPECT_FALSE(path[3].must_exist);
}

TEST(PluginCatalog, UnknownPluginNameListsTheAvailableOnes) {
  const PluginCatalog catalog = scan_dirs({"good"});
  try {
    catalog.require(PluginKind::task, "nope", {"run.toml", 3, 8});
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    expect_contains(e.what(), {"run.toml:3:8", "task.type", "no task plugin named 'nope'",
                               "available task plugins: fixture_echo"});
  }
}

// A host that has nothing to lend: the fixture task needs no model.
class NoPluginsHost final : public TaskHost {
 public:
  std::unique_ptr<Model> create_model() override { throw ConfigError("no [model] table"); }
  std::string model_type() const override { return ""; }
  std::unique_ptr<Optimizer> create_optimizer() override {
    throw ConfigError("no [optimizer] table");
  }
  std::string config_toml() const override { return ""; }
};

class PluginRun : public ::testing::Test {
 protected:
  MpiRuntime runtime_{MpiRuntime::Mode::single_process};
  ParallelState parallel_ = ParallelState::create(runtime_, ParallelSizes{});
  std::shared_ptr<Logger> log_ = make_logger({"warn", "", 0, 1});
};

TEST_F(PluginRun, TaskReceivesItsValidatedTableAndRuns) {
  const PluginCatalog catalog = scan_dirs({"good"});
  const PluginRecord& record = *catalog.find(PluginKind::task, "fixture_echo");
  auto cfg = config::Config::from_raw(
      config::RawConfig::load_string("[task]\ntype = \"fixture_echo\"\nrepeat = 3\n", "t.toml"));
  const auto& table = cfg.validate_plugin_table(catalog.config_schema(record));
  PluginContext ctx{*log_, parallel_, table, cfg.core()};
  auto object = catalog.create(record, ctx);
  auto* task = dynamic_cast<Task*>(object.get());
  ASSERT_NE(task, nullptr);
  NoPluginsHost host;
  const TaskResult result = task->run(host);
  ASSERT_EQ(result.metrics.size(), 1u);
  EXPECT_EQ(result.metrics[0].first, "rank_sum_times_repeat");
  EXPECT_DOUBLE_EQ(result.metrics[0].second, 3.0);
}

TEST_F(PluginRun, PluginSchemaRefusesBadKeysWithLocations) {
  const PluginCatalog catalog = scan_dirs({"good"});
  const PluginRecord& record = *catalog.find(PluginKind::task, "fixture_echo");
  auto cfg = config::Config::from_raw(config::RawConfig::load_string(
      "[task]\ntype = \"fixture_echo\"\ngreeting = \"\"\n", "t.toml"));
  try {
    cfg.validate_plugin_table(catalog.config_schema(record));
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    expect_contains(e.what(), {"t.toml:3:", "task.greeting", "must not be empty"});
  }
}

TEST_F(PluginRun, ErrorsThrownByCreateNameThePluginAndFile) {
  const PluginCatalog catalog = scan_dirs({"throws"});
  const PluginRecord& record = *catalog.find(PluginKind::task, "throws_on_create");
  auto cfg = config::Config::from_raw(
      config::RawConfig::load_string("[task]\ntype = \"throws_on_create\"\n", "t.toml"));
  const auto& table = cfg.validate_plugin_table(catalog.config_schema(record));
  PluginContext ctx{*log_, parallel_, table, cfg.core()};
  try {
    catalog.create(record, ctx);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    expect_contains(e.what(), {"task plugin 'throws_on_create'", "libfixture_throws.so",
                               "the fixture refuses to start (greeting was 'hello')"});
  }
}

}  // namespace
}  // namespace megatron
