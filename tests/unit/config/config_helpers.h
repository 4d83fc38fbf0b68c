// Helpers for config tests: parse TOML text, expect a ConfigError containing given fragments.
#pragma once

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "megatron/config/config.h"
#include "megatron/error.h"

namespace megatron::testing {

inline config::Config parse_config(const std::string& text,
                                   std::initializer_list<std::string> overrides = {}) {
  auto raw = config::RawConfig::load_string(text, "test.toml");
  for (const auto& o : overrides)
    raw.apply_override(o);
  return config::Config::from_raw(std::move(raw));
}

// The message of the ConfigError that `fn` throws ("" and a test failure if it throws none).
template <typename Fn>
std::string config_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return {};
}

inline void expect_contains(const std::string& text, std::initializer_list<std::string> parts) {
  for (const auto& p : parts) {
    EXPECT_NE(text.find(p), std::string::npos) << "message:\n  " << text << "\nlacks: " << p;
  }
}

// A fresh directory under the test temp dir, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("megatron-test-" + std::string(info->test_suite_name()) + "-" + info->name() + "-" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    const auto p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace megatron::testing
