// Checkpoint round trips: every dtype bit for bit, attributes, dotted nested names, strided views,
// scalars and empty tensors, skip_prefixes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "checkpoint_test_util.h"

namespace megatron::checkpoint {
namespace {

using testing::bitwise_equal;
using testing::TempDir;

// A tensor whose elements are random bit patterns (NaNs, infinities, subnormals included).
Tensor random_bits(const Shape& shape, DType dtype, std::uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (std::size_t i = 0; i < t.nbytes(); ++i)
    bytes[i] = static_cast<unsigned char>(rng());
  if (dtype == DType::bf16 || dtype == DType::f16) {
    // Half NaNs pass through f32; their payload is canonicalised there (see checkpoint.h), so
    // give each NaN the canonical quiet form to compare bits.
    auto* half = static_cast<std::uint16_t*>(t.raw_data());
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      const bool bf = dtype == DType::bf16;
      const std::uint16_t exponent = bf ? 0x7f80 : 0x7c00, mantissa = bf ? 0x007f : 0x03ff;
      if ((half[i] & exponent) == exponent && (half[i] & mantissa) != 0)
        half[i] = static_cast<std::uint16_t>((half[i] & 0x8000) | (bf ? 0x7fc0 : 0x7e00));
    }
  }
  return t;
}

CheckpointState sample_state() {
  CheckpointState state;
  state.iteration = 1234567;
  state.consumed_train_samples = std::int64_t(1) << 40;
  state.consumed_valid_samples = 321;
  state.skipped_iterations = 7;
  state.config_toml = "[model]\ntype = \"gpt\"\nnum_layers = 2\n\n[training]\nlr = 3e-4\n";
  return state;
}

TEST(CheckpointRoundTrip, EveryDtypeBitwise) {
  TempDir dir;
  CheckpointState state = sample_state();
  const DType dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                          DType::i32, DType::i64, DType::u8};
  std::uint32_t seed = 1;
  for (DType dtype : dtypes) {
    state.tensors["model/" + std::string(dtype_name(dtype))] =
        random_bits({3, 5, 7}, dtype, seed++);
  }
  const auto file = save_checkpoint(dir.path(), state);
  EXPECT_EQ(file, dir.path() / "iter_1234567.h5");
  const CheckpointState loaded = load_checkpoint(file);
  ASSERT_EQ(loaded.tensors.size(), state.tensors.size());
  for (const auto& [name, tensor] : state.tensors) {
    ASSERT_TRUE(loaded.tensors.count(name)) << name;
    EXPECT_TRUE(bitwise_equal(tensor, loaded.tensors.at(name))) << name;
  }
}

TEST(CheckpointRoundTrip, AttributesExactly) {
  TempDir dir;
  CheckpointState state = sample_state();
  state.int_attributes = {{"rng.seed", 1234},
                          {"rng.philox_offset", std::numeric_limits<std::int64_t>::max()},
                          {"min", std::numeric_limits<std::int64_t>::min()},
                          {"iteration", -5}};  // may shadow a root name: prefixed on disk
  state.float_attributes = {{"loss_scale", 65536.0},
                            {"lr", 2.9999999999999997e-4},
                            {"tiny", std::numeric_limits<double>::denorm_min()},
                            {"inf", -std::numeric_limits<double>::infinity()},
                            {"third", 1.0 / 3.0}};
  std::uint64_t nan_bits = 0x7ff8000000abcdefULL;
  double nan;
  std::memcpy(&nan, &nan_bits, sizeof nan);
  state.float_attributes["nan"] = nan;
  save_checkpoint(dir.path(), state);
  const CheckpointState loaded = load_checkpoint(dir.path());
  EXPECT_EQ(loaded.iteration, state.iteration);
  EXPECT_EQ(loaded.consumed_train_samples, state.consumed_train_samples);
  EXPECT_EQ(loaded.consumed_valid_samples, state.consumed_valid_samples);
  EXPECT_EQ(loaded.skipped_iterations, state.skipped_iterations);
  EXPECT_EQ(loaded.config_toml, state.config_toml);
  EXPECT_EQ(loaded.int_attributes, state.int_attributes);
  ASSERT_EQ(loaded.float_attributes.size(), state.float_attributes.size());
  for (const auto& [key, value] : state.float_attributes) {
    ASSERT_TRUE(loaded.float_attributes.count(key)) << key;
    EXPECT_EQ(std::memcmp(&value, &loaded.float_attributes.at(key), sizeof value), 0) << key;
  }
  EXPECT_TRUE(loaded.tensors.empty());
}

TEST(CheckpointRoundTrip, LargeConfigText) {
  TempDir dir;
  CheckpointState state = sample_state();
  for (int i = 0; i < 20000; ++i)
    state.config_toml += "key_" + std::to_string(i) + " = \"ünïcode value\"\n";
  save_checkpoint(dir.path(), state);
  EXPECT_EQ(load_checkpoint(dir.path()).config_toml, state.config_toml);
}

TEST(CheckpointRoundTrip, NestedNamesWithDots) {
  TempDir dir;
  CheckpointState state = sample_state();
  const std::vector<std::string> names = {
      "model/decoder.layers.0.mlp.linear_fc1.weight",
      "model/decoder.layers.0.self_attention.linear_qkv.layer_norm_weight",
      "model/embedding.word_embeddings.weight",
      "optimizer/exp_avg/decoder.layers.0.mlp.linear_fc1.weight",
      "optimizer/exp_avg_sq/decoder.layers.0.mlp.linear_fc1.weight",
      "a/b/c/d/e/f.g",
      "top_level",
      "model/..dots..",
  };
  std::uint32_t seed = 100;
  for (const auto& name : names)
    state.tensors[name] = random_bits({4, 2}, DType::f32, seed++);
  save_checkpoint(dir.path(), state);
  const CheckpointState loaded = load_checkpoint(dir.path());
  ASSERT_EQ(loaded.tensors.size(), names.size());
  for (const auto& name : names) {
    ASSERT_TRUE(loaded.tensors.count(name)) << name;
    EXPECT_TRUE(bitwise_equal(state.tensors.at(name), loaded.tensors.at(name))) << name;
  }
}

TEST(CheckpointRoundTrip, NonContiguousViews) {
  TempDir dir;
  CheckpointState state = sample_state();
  // int64 values beyond 2^53 would not survive a copy through double.
  Tensor big = Tensor::empty({6, 5}, DType::i64);
  for (std::int64_t i = 0; i < big.numel(); ++i)
    big.data<std::int64_t>()[i] = (std::int64_t(1) << 62) + 2 * i + 1;
  const Tensor f32 = random_bits({4, 6, 3}, DType::f32, 7);
  const Tensor bf16 = random_bits({5, 8}, DType::bf16, 8);
  state.tensors["model/transposed"] = big.transpose(0, 1);
  state.tensors["model/sliced"] = f32.slice(1, 2, 3);
  state.tensors["model/permuted"] = f32.permute({2, 0, 1});
  state.tensors["model/bf16_column"] = bf16.select(1, 3);
  state.tensors["model/bf16_transposed"] = bf16.transpose(0, 1);
  for (const auto& [name, tensor] : state.tensors)
    ASSERT_FALSE(tensor.is_contiguous()) << name;
  save_checkpoint(dir.path(), state);
  const CheckpointState loaded = load_checkpoint(dir.path());
  for (const auto& [name, tensor] : state.tensors) {
    ASSERT_TRUE(loaded.tensors.count(name)) << name;
    EXPECT_TRUE(loaded.tensors.at(name).is_contiguous());
    EXPECT_TRUE(bitwise_equal(tensor, loaded.tensors.at(name))) << name;
  }
}

TEST(CheckpointRoundTrip, ScalarsAndEmptyTensors) {
  TempDir dir;
  CheckpointState state = sample_state();
  state.tensors["scalars/f64"] = Tensor::full({}, DType::f64, 2.5);
  state.tensors["scalars/i64"] = Tensor::full({}, DType::i64, -3);
  state.tensors["scalars/bf16"] = Tensor::full({}, DType::bf16, 0.5);
  state.tensors["empty/f32"] = Tensor::empty({0}, DType::f32);
  state.tensors["empty/i32"] = Tensor::empty({3, 0, 2}, DType::i32);
  state.tensors["empty/f16"] = Tensor::empty({0, 4}, DType::f16);
  save_checkpoint(dir.path(), state);
  const CheckpointState loaded = load_checkpoint(dir.path());
  ASSERT_EQ(loaded.tensors.size(), state.tensors.size());
  for (const auto& [name, tensor] : state.tensors) {
    ASSERT_TRUE(loaded.tensors.count(name)) << name;
    EXPECT_TRUE(bitwise_equal(tensor, loaded.tensors.at(name))) << name;
  }
}

TEST(CheckpointRoundTrip, SkipPrefixes) {
  TempDir dir;
  CheckpointState state = sample_state();
  state.tensors["model/w"] = Tensor::full({2}, DType::f32, 1);
  state.tensors["optimizer/exp_avg/w"] = Tensor::full({2}, DType::f32, 2);
  state.tensors["optimizer/exp_avg_sq/w"] = Tensor::full({2}, DType::f32, 3);
  state.tensors["rng/state"] = Tensor::full({4}, DType::i64, 4);
  state.int_attributes["rng.seed"] = 9;
  save_checkpoint(dir.path(), state);

  const CheckpointState model_only = load_checkpoint(dir.path(), {"optimizer/", "rng/"});
  ASSERT_EQ(model_only.tensors.size(), 1u);
  EXPECT_TRUE(model_only.tensors.count("model/w"));
  EXPECT_EQ(model_only.iteration, state.iteration);
  EXPECT_EQ(model_only.int_attributes.at("rng.seed"), 9);

  const CheckpointState partial = load_checkpoint(dir.path(), {"optimizer/exp_avg_sq"});
  EXPECT_EQ(partial.tensors.size(), 3u);
  EXPECT_FALSE(partial.tensors.count("optimizer/exp_avg_sq/w"));
  EXPECT_EQ(load_checkpoint(dir.path(), {""}).tensors.size(), 0u);  // "" skips everything
}

}  // namespace
}  // namespace megatron::checkpoint
