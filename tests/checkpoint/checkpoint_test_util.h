// Helpers for the checkpoint tests: a temporary directory, bitwise tensor comparison, error checks.
#pragma once

#include <gtest/gtest.h>
#include "common/scratch_dir.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
#include "megatron/tensor/tensor.h"

namespace megatron::checkpoint::testing {

using TempDir = megatron::testing::ScratchDir;

// The elements of a (possibly strided) host tensor in logical order, as raw bytes.
inline std::string logical_bytes(const Tensor& t) {
  const std::size_t size = t.element_size();
  std::string out(static_cast<std::size_t>(t.numel()) * size, '\0');
  const char* src = static_cast<const char*>(t.raw_data());
  std::vector<std::int64_t> counter(static_cast<std::size_t>(t.dim()), 0);
  std::int64_t index = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    std::memcpy(out.data() + i * std::int64_t(size), src + index * std::int64_t(size), size);
    for (int d = t.dim() - 1; d >= 0; --d) {
      if (++counter[d] < t.shape()[d]) {
        index += t.strides()[d];
        break;
      }
      index -= t.strides()[d] * (t.shape()[d] - 1);
      counter[d] = 0;
    }
  }
  return out;
}

// An f32 tensor of `shape` holding i * step + offset at flat index i.
inline Tensor ramp(const Shape& shape, float step = 0.5f, float offset = 0.0f) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(i) * step + offset;
  return Tensor::from(v, shape);
}

// The rows `runs` select along `dim` of `full`, each run at its local offset: what read_slice
// must return, computed from the saved tensor itself.
inline Tensor expected_slice(const Tensor& full, int dim, const std::vector<ShardRun>& runs) {
  Shape local = full.shape();
  std::int64_t rows = 0;
  for (const ShardRun& run : runs)
    rows += run.length;
  local[std::size_t(dim)] = rows;
  Tensor out = Tensor::empty(local, DType::f32);
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d)
    outer *= full.shape()[std::size_t(d)];
  for (std::size_t d = std::size_t(dim) + 1; d < full.shape().size(); ++d)
    inner *= full.shape()[d];
  const std::int64_t global_rows = full.shape()[std::size_t(dim)];
  for (std::int64_t o = 0; o < outer; ++o)
    for (const ShardRun& run : runs)
      for (std::int64_t r = 0; r < run.length; ++r)
        std::memcpy(out.data<float>() + (o * rows + run.local_offset + r) * inner,
                    full.data<float>() + (o * global_rows + run.global_offset + r) * inner,
                    std::size_t(inner) * 4);
  return out;
}

// Same dtype, same shape, same bits.
inline ::testing::AssertionResult bitwise_equal(const Tensor& expected, const Tensor& actual) {
  if (expected.dtype() != actual.dtype() || expected.shape() != actual.shape()) {
    return ::testing::AssertionFailure()
           << "expected " << expected.describe() << ", got " << actual.describe();
  }
  if (logical_bytes(expected) != logical_bytes(actual)) {
    return ::testing::AssertionFailure() << expected.describe() << ": the bytes differ";
  }
  return ::testing::AssertionSuccess();
}

// Slices of tensors "w" ([700, 2500]) and "cube" ([3, 300, 1500]) of `saved`, read from `file`
// into f32 (bit for bit), f64 (converted) and bf16 destinations: one run, runs crossing tile
// edges, several runs out of order in the output, an empty run.
inline void expect_slices_read_back(const std::filesystem::path& file,
                                    const CheckpointState& saved) {
  const CheckpointReader reader(file);
  struct Case {
    std::string name;
    int dim;
    std::vector<ShardRun> runs;
  };
  const std::vector<Case> cases = {
      {"w", 0, {{100, 0, 350}}},
      {"w", 1, {{1000, 0, 1100}}},
      {"w", 1, {{0, 0, 5}, {1023, 5, 2}, {2400, 7, 100}}},
      {"w", 0, {{600, 0, 100}, {0, 100, 17}, {300, 117, 0}}},
      {"cube", 1, {{299, 0, 1}, {0, 1, 40}}},
      {"cube", 2, {{1020, 0, 480}}},
      {"cube", 0, {{2, 0, 1}}},
  };
  for (const Case& c : cases) {
    const Tensor want = expected_slice(saved.tensors.at(c.name), c.dim, c.runs);
    Tensor got = Tensor::empty(want.shape(), DType::f32);
    reader.read_slice(c.name, c.dim, c.runs, got);
    EXPECT_TRUE(bitwise_equal(got, want)) << c.name << " along " << c.dim;
    Tensor wide = Tensor::empty(want.shape(), DType::f64);
    reader.read_slice(c.name, c.dim, c.runs, wide);
    EXPECT_TRUE(bitwise_equal(want.to(DType::f64), wide)) << c.name << " along " << c.dim;
    Tensor half = Tensor::empty(want.shape(), DType::bf16);
    reader.read_slice(c.name, c.dim, c.runs, half);
    EXPECT_TRUE(bitwise_equal(want.to(DType::bf16), half)) << c.name << " along " << c.dim;
  }
}

}  // namespace megatron::checkpoint::testing

// EXPECT_ERROR_MENTIONING(statement, text...): the statement throws megatron::Error whose message
// contains every given piece of text.
#define EXPECT_ERROR_MENTIONING(statement, ...)                                           \
  do {                                                                                    \
    try {                                                                                 \
      statement;                                                                          \
      ADD_FAILURE() << #statement " did not throw megatron::Error";                       \
    } catch (const megatron::Error& error_) {                                             \
      const std::string message_ = error_.what();                                         \
      for (const std::string& piece_ : std::initializer_list<std::string>{__VA_ARGS__}) { \
        EXPECT_NE(message_.find(piece_), std::string::npos)                               \
            << "message \"" << message_ << "\" lacks \"" << piece_ << "\"";               \
      }                                                                                   \
    }                                                                                     \
  } while (false)
