// Sharded saves in one process (sec2 driver, a group of one): the file equals what
// save_checkpoint writes, slices read back at any cut, and bad slices are refused by name.
#include <map>
#include <vector>

#include "checkpoint_test_util.h"
#include "megatron/parallel/communicator.h"

namespace megatron::checkpoint {
namespace {

using testing::bitwise_equal;
using testing::TempDir;

Tensor iota(const Shape& shape) {
  return testing::ramp(shape);
}

TensorSlice whole(const Tensor& t) {
  TensorSlice s;
  s.global_shape = t.shape();
  s.dtype = t.dtype();
  s.local = t;
  return s;
}

TEST(ShardedCheckpoint, OneProcessWritesTheSameFileLayout) {
  TempDir dir;
  auto self = make_self_communicator();
  CheckpointState s;
  s.iteration = 12;
  s.consumed_train_samples = 96;
  s.config_toml = "[model]\ntype = \"gpt\"\n";
  s.int_attributes["layout.data_parallel_size"] = 1;
  s.float_attributes["loss_scaler.scale"] = 65536.0;
  const Tensor w = iota({6, 4});
  std::map<std::string, TensorSlice> slices;
  slices.emplace("model/w", whole(w));
  slices.emplace("optimizer/exp_avg/w", whole(w.transpose(0, 1)));  // any strides
  TensorSlice b = whole(Tensor::from(std::vector<double>{1.5, -2}, {2}));
  slices.emplace("model/b", b);
  const auto file = save_checkpoint_sharded(dir.path(), s, slices, *self);
  EXPECT_EQ(file, checkpoint_file(dir.path(), 12));
  EXPECT_EQ(latest_iteration(dir.path()), 12);

  const CheckpointState back = load_checkpoint(dir.path());
  EXPECT_EQ(back.iteration, 12);
  EXPECT_EQ(back.consumed_train_samples, 96);
  EXPECT_EQ(back.config_toml, s.config_toml);
  EXPECT_EQ(back.int_attributes, s.int_attributes);
  EXPECT_EQ(back.float_attributes, s.float_attributes);
  EXPECT_TRUE(bitwise_equal(w, back.tensors.at("model/w")));
  EXPECT_TRUE(
      bitwise_equal(w.transpose(0, 1).contiguous(), back.tensors.at("optimizer/exp_avg/w")));
  EXPECT_TRUE(bitwise_equal(b.local, back.tensors.at("model/b")));
}

TEST(ShardedCheckpoint, SlicesAndHyperslabsReadBackAtAnyCut) {
  TempDir dir;
  auto self = make_self_communicator();
  CheckpointState s;
  s.iteration = 1;
  // Written as two "ranks" would not be possible in one process; here one rank writes rows
  // {0,1} and {4,5} of an [8, 3] tensor through the run list and another tensor whole.
  Parameter p;
  p.name = "w";
  p.global_shape = {8, 3};
  p.partition_dim = 0;
  p.partition_count = 1;
  const Tensor w = iota({8, 3});
  std::map<std::string, TensorSlice> slices;
  slices.emplace("model/w", whole(w));
  save_checkpoint_sharded(dir.path(), s, slices, *self);

  const CheckpointReader reader(dir.path());
  EXPECT_EQ(reader.names(), std::vector<std::string>{"model/w"});
  EXPECT_EQ(reader.shape("model/w"), (Shape{8, 3}));
  // SwiGLU-style cut: 2 blocks x 2 ranks, rank 1 holds rows 2-3 and 6-7.
  p.partition_count = 2;
  p.partition_rank = 1;
  p.partition_blocks = 2;
  Tensor got = Tensor::empty(shard_shape(p), DType::f32);
  reader.read_slice("model/w", 0, shard_runs(p), got);
  const std::vector<float> all = w.to_vector<float>();
  std::vector<float> expected(all.begin() + 6, all.begin() + 12);
  expected.insert(expected.end(), all.begin() + 18, all.end());
  EXPECT_EQ(got.to_vector<float>(), expected);
  // Columns too (a row-parallel cut along dimension 1), and f64 destinations convert.
  Tensor col = Tensor::empty({8, 1}, DType::f64);
  reader.read_slice("model/w", 1, {{2, 0, 1}}, col);
  for (std::int64_t i = 0; i < 8; ++i)
    EXPECT_EQ(col.to_vector<double>()[static_cast<std::size_t>(i)],
              all[static_cast<std::size_t>(i * 3 + 2)]);

  Tensor wrong = Tensor::empty({3, 3}, DType::f32);
  EXPECT_ERROR_MENTIONING(reader.read_slice("model/w", 0, shard_runs(p), wrong), "model/w",
                          "[4, 3]");
  EXPECT_ERROR_MENTIONING(reader.read_slice("model/w", 0, {{6, 0, 4}}, got), "outside");
  EXPECT_ERROR_MENTIONING(reader.shape("model/nope"), "has no tensor 'model/nope'");
}

TEST(ShardedCheckpoint, BadSlicesAreRefusedBeforeAnythingIsWritten) {
  TempDir dir;
  auto self = make_self_communicator();
  CheckpointState s;
  s.iteration = 4;
  std::map<std::string, TensorSlice> slices;
  TensorSlice t;
  t.global_shape = {8, 3};
  t.partition_dim = 0;
  t.runs = {{0, 0, 4}};
  t.local = iota({3, 3});  // the runs say 4 rows
  slices.emplace("model/w", t);
  EXPECT_ERROR_MENTIONING(save_checkpoint_sharded(dir.path(), s, slices, *self), "model/w",
                          "[3, 3]", "[4, 3]");
  slices.at("model/w").runs = {{6, 0, 4}};
  slices.at("model/w").local = iota({4, 3});
  EXPECT_ERROR_MENTIONING(save_checkpoint_sharded(dir.path(), s, slices, *self), "outside");
  EXPECT_FALSE(std::filesystem::exists(checkpoint_file(dir.path(), 4)));
  EXPECT_FALSE(latest_iteration(dir.path()).has_value());
}

}  // namespace
}  // namespace megatron::checkpoint
