// Helpers for the indexed dataset tests: scratch directories, whole-file I/O, error matching.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include "common/scratch_dir.h"

#include <gtest/gtest.h>

#include "megatron/error.h"

namespace megatron::test {

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream contents;
  contents << in.rdbuf();
  return std::move(contents).str();
}

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

using ScratchDir = megatron::testing::ScratchDir;

// The message of the megatron::Error that `action` throws ("" if it throws none).
inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_MESSAGE(message, fragment) \
  EXPECT_NE((message).find(fragment), std::string::npos) << "message: " << (message)

}  // namespace megatron::test
