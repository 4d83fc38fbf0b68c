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
