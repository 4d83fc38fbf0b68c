// Data-parallel gradient buffers and sharded checkpoints on 4 MPI ranks: bucketed mean with and
// without overlap, distributed-optimizer shards and the parameter all-gather, and one HDF5 file
// written by every rank of a simulated TP2 x DP2 layout, read back whole and at another layout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "megatron/backend/backend.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"
#include "parallel/mpi_test_main.h"
#include "train/grad_buffer.h"

namespace megatron::train {
namespace {

ParameterSet make_params() {
  ParameterSet params;
  for (const Shape& shape : {Shape{3, 5}, Shape{7}, Shape{2, 2}}) {
    Parameter p;
    p.name = "p" + std::to_string(params.size());
    p.global_shape = shape;
    p.value = Tensor::zeros(shape, DType::f32);
    p.grad = Tensor::zeros(shape, DType::f32);
    float* v = p.value.data<float>();
    for (std::int64_t i = 0; i < p.value.numel(); ++i)
      v[i] = static_cast<float>(10 * params.size() + i);
    params.add(std::move(p));
  }
  return params;
}

// Each rank's grad element i of parameter k is (rank + 1) * (k + 1) * (i + 1); the mean over 4
// ranks is 2.5 * (k + 1) * (i + 1), exact in f32.
void fill_grads(ParameterSet& params, int rank) {
  for (std::size_t k = 0; k < params.size(); ++k) {
    float* g = params[k].grad.data<float>();
    for (std::int64_t i = 0; i < params[k].grad.numel(); ++i)
      g[i] = static_cast<float>((rank + 1) * (k + 1) * (i + 1));
  }
}

float mean_grad(std::size_t k, std::int64_t i) {
  return 2.5f * static_cast<float>((k + 1) * (i + 1));
}

class GradBuffersMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = std::make_unique<ParallelState>(
        ParallelState::create(test::mpi_runtime(), ParallelSizes{}));
    ASSERT_EQ(state_->dp_size(), 4) << "run on 4 ranks";
  }
  Communicator& data() { return state_->comm(Group::data); }
  std::unique_ptr<ParallelState> state_;
  Backend& be_ = backend_for(Device::cpu());
};

TEST_F(GradBuffersMpi, OverlappedBucketsGiveTheMean) {
  ParameterSet params = make_params();
  GradBuffers buffers(params, data(), be_, {true, false, false, 8});
  ASSERT_EQ(buffers.layout().buckets.size(), 2u);  // {p2, p1} (11 >= 8), then {p0}
  buffers.zero_grads();
  fill_grads(params, data().rank());
  // Reported as backward would: last parameters first, one at a time. The first bucket starts
  // as soon as its two parameters are in, while p0's gradient is still "being computed".
  buffers.grads_ready({&params[2]});
  EXPECT_EQ(buffers.buckets_started(), 0u);
  buffers.grads_ready({&params[1]});
  EXPECT_EQ(buffers.buckets_started(), 1u);
  buffers.grads_ready({&params[0]});
  EXPECT_EQ(buffers.buckets_started(), 2u);
  buffers.finish_grad_sync();
  for (std::size_t k = 0; k < params.size(); ++k)
    for (std::int64_t i = 0; i < params[k].grad.numel(); ++i)
      EXPECT_EQ(params[k].grad.data<float>()[i], mean_grad(k, i))
          << "param " << k << " [" << i << "]";
  // A parameter reported twice in one step is a model bug, named.
  buffers.zero_grads();
  buffers.grads_ready({&params[0]});
  try {
    buffers.grads_ready({&params[0]});
    ADD_FAILURE() << "a second report was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'p0' twice"), std::string::npos) << e.what();
  }
  buffers.finish_grad_sync();
}

TEST_F(GradBuffersMpi, OneBucketWithoutOverlap) {
  ParameterSet params = make_params();
  GradBuffers buffers(params, data(), be_, {false, false, false, std::nullopt});
  EXPECT_EQ(buffers.layout().buckets.size(), 1u);
  fill_grads(params, data().rank());
  buffers.finish_grad_sync();
  for (std::size_t k = 0; k < params.size(); ++k)
    for (std::int64_t i = 0; i < params[k].grad.numel(); ++i)
      EXPECT_EQ(params[k].grad.data<float>()[i], mean_grad(k, i));
}

TEST_F(GradBuffersMpi, DistributedOptimizerShardsReduceStepAndGather) {
  ParameterSet params = make_params();
  GradBuffers buffers(params, data(), be_, {true, true, true, 8});
  // Values moved into the parameter buffer unchanged.
  for (std::size_t k = 0; k < params.size(); ++k)
    for (std::int64_t i = 0; i < params[k].value.numel(); ++i)
      ASSERT_EQ(params[k].value.data<float>()[i], static_cast<float>(10 * k + i));
  fill_grads(params, data().rank());
  for (std::size_t k = params.size(); k-- > 0;)
    buffers.grads_ready({&params[k]});
  buffers.finish_grad_sync();

  // Shards: reduced grads in the owned ranges; together they cover every element exactly once.
  std::int64_t owned = 0;
  ParameterSet& shards = buffers.optimizer_params();
  ASSERT_EQ(shards.size(), buffers.owned().size());
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const OwnedRange& r = buffers.owned()[s];
    EXPECT_EQ(shards[s].name, r.param->name);
    EXPECT_EQ(shards[s].value.numel(), r.end - r.begin);
    owned += r.end - r.begin;
    for (std::int64_t i = r.begin; i < r.end; ++i) {
      EXPECT_EQ(shards[s].grad.data<float>()[i - r.begin], mean_grad(r.index, i));
      shards[s].value.data<float>()[i - r.begin] =
          static_cast<float>(1000 * r.index + i);  // "step"
    }
  }
  EXPECT_EQ(data().all_reduce_value(owned), 15 + 7 + 4);
  // overlap_param_gather: both buckets' gathers stay in flight until forward needs them; p0
  // (first in forward order, the buffer's last bucket) is complete once it is asked for.
  buffers.start_param_gather();
  EXPECT_EQ(buffers.gathers_in_flight(), 2u);
  buffers.wait_param_gather({&params[0]});
  EXPECT_LE(buffers.gathers_in_flight(), 1u);
  for (std::int64_t i = 0; i < params[0].value.numel(); ++i)
    EXPECT_EQ(params[0].value.data<float>()[i], static_cast<float>(i));
  buffers.wait_param_gather();
  EXPECT_EQ(buffers.gathers_in_flight(), 0u);
  for (std::size_t k = 0; k < params.size(); ++k)
    for (std::int64_t i = 0; i < params[k].value.numel(); ++i)
      EXPECT_EQ(params[k].value.data<float>()[i], static_cast<float>(1000 * k + i));
  Parameter stranger;
  stranger.name = "stranger";
  EXPECT_THROW(buffers.wait_param_gather({&stranger}), Error);
}

TEST_F(GradBuffersMpi, GatherWithoutOverlapCompletesAtOnce) {
  ParameterSet params = make_params();
  GradBuffers buffers(params, data(), be_, {false, true, false, std::nullopt});
  fill_grads(params, data().rank());
  buffers.finish_grad_sync();
  buffers.start_param_gather();
  EXPECT_EQ(buffers.gathers_in_flight(), 0u);
  for (std::size_t k = 0; k < params.size(); ++k)
    for (std::int64_t i = 0; i < params[k].value.numel(); ++i)
      EXPECT_EQ(params[k].value.data<float>()[i], static_cast<float>(10 * k + i));
}

// Under expert parallelism (EP2 over 4 data-parallel ranks: expert-data pairs {0, 2}, {1, 3}) an
// expert parameter's gradient is summed over its expert-data pair only and scaled by 1/dp, as
// Megatron's expert buffers; dense parameters keep the mean over all 4 ranks. With the
// distributed optimizer the experts' buffer is sharded over the pair.
TEST_F(GradBuffersMpi, ExpertsReduceOverTheExpertDataGroup) {
  const ParallelState ep2 = ParallelState::create(test::mpi_runtime(), ParallelSizes{.expert = 2});
  ASSERT_EQ(ep2.edp_size(), 2);
  for (const bool distributed : {false, true}) {
    ParameterSet params = make_params();
    params[1].experts = 2;  // p1 holds this rank's experts
    GradBuffers buffers(params, ep2.comm(Group::data), be_, {false, distributed, false, {}},
                        &ep2.comm(Group::expert_data));
    ASSERT_EQ(buffers.domains().size(), 2u);
    EXPECT_EQ(buffers.domains()[1].params, std::vector<std::size_t>{1});
    fill_grads(params, data().rank());
    buffers.finish_grad_sync();
    const std::vector<int>& pair = ep2.group_ranks(Group::expert_data);
    auto expected = [&](std::size_t k, std::int64_t i) {
      if (k != 1) return mean_grad(k, i);
      float sum = 0;
      for (const int r : pair)
        sum += static_cast<float>((r + 1) * (k + 1) * (i + 1));
      return sum / 4.0f;
    };
    std::int64_t expert_owned = 0;
    if (distributed) {
      ParameterSet& shards = buffers.optimizer_params();
      for (std::size_t s = 0; s < shards.size(); ++s) {
        const OwnedRange& r = buffers.owned()[s];
        EXPECT_EQ(r.domain, r.index == 1 ? 1u : 0u);
        if (r.index == 1) expert_owned += r.end - r.begin;
        for (std::int64_t i = r.begin; i < r.end; ++i)
          EXPECT_EQ(shards[s].grad.data<float>()[i - r.begin], expected(r.index, i));
      }
      EXPECT_EQ(ep2.comm(Group::expert_data).all_reduce_value(expert_owned), 7);
    } else {
      for (std::size_t k = 0; k < params.size(); ++k)
        for (std::int64_t i = 0; i < params[k].grad.numel(); ++i)
          EXPECT_EQ(params[k].grad.data<float>()[i], expected(k, i)) << k << " [" << i << "]";
    }
  }
}

// A directory every rank agrees on (rank 0's process id).
std::filesystem::path shared_dir(Communicator& world, const std::string& what) {
  std::int64_t pid = ::getpid();
  world.broadcast(&pid, 1, DType::i64, 0);
  return std::filesystem::temp_directory_path() / ("megatron_" + what + "_" + std::to_string(pid));
}

// W [8, 3] = 100 i + j, cut as SwiGLU's fc1 (2 blocks) over 2 tensor-parallel ranks; b [5].
Parameter weight(int tp_rank, int tp) {
  Parameter p;
  p.name = "w";
  p.global_shape = {8, 3};
  p.partition_dim = 0;
  p.partition_count = tp;
  p.partition_rank = tp_rank;
  p.partition_blocks = 2;
  return p;
}

Tensor rows_of(const Parameter& p) {
  Tensor t = Tensor::empty(shard_shape(p), DType::f32);
  std::int64_t row = 0;
  for (const ShardRun& run : shard_runs(p))
    for (std::int64_t i = 0; i < run.length; ++i, ++row)
      for (std::int64_t j = 0; j < 3; ++j)
        t.data<float>()[row * 3 + j] = static_cast<float>(100 * (run.global_offset + i) + j);
  return t;
}

TEST_F(GradBuffersMpi, ShardedCheckpointLoadsAtAnotherLayout) {
  Communicator& world = state_->comm(Group::world);
  const int tp_rank = world.rank() % 2, dp_rank = world.rank() / 2;
  const std::filesystem::path dir = shared_dir(world, "sharded_ckpt");
  checkpoint::CheckpointState s;
  s.iteration = 7;
  s.config_toml = "[model]\n";
  s.int_attributes["layout.data_parallel_size"] = 2;
  std::map<std::string, checkpoint::TensorSlice> slices;
  const Parameter w = weight(tp_rank, 2);
  checkpoint::TensorSlice ws;
  ws.global_shape = w.global_shape;
  ws.partition_dim = 0;
  ws.runs = shard_runs(w);
  ws.local = rows_of(w);
  ws.write = dp_rank == 0;  // data-parallel replicas select nothing
  slices.emplace("model/w", ws);
  checkpoint::TensorSlice bs;
  bs.global_shape = {5};
  bs.local = Tensor::from(std::vector<float>{1, 2, 3, 4, 5}, {5});
  bs.write = dp_rank == 0 && tp_rank == 0;
  slices.emplace("model/b", bs);
  const auto file = checkpoint::save_checkpoint_sharded(dir, s, slices, world);
  EXPECT_EQ(checkpoint::latest_iteration(dir), 7);

  // Whole, as `inspect` reads it: no trace of the layout but the attribute.
  const checkpoint::CheckpointState whole = checkpoint::load_checkpoint(file);
  EXPECT_EQ(whole.int_attributes.at("layout.data_parallel_size"), 2);
  const std::vector<float> wv = whole.tensors.at("model/w").to_vector<float>();
  for (std::int64_t i = 0; i < 8; ++i)
    for (std::int64_t j = 0; j < 3; ++j)
      EXPECT_EQ(wv[static_cast<std::size_t>(i * 3 + j)], static_cast<float>(100 * i + j));
  EXPECT_EQ(whole.tensors.at("model/b").to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5}));

  // At tensor-parallel size 4: this rank's slice of each block.
  const checkpoint::CheckpointReader reader(file);
  const Parameter w4 = weight(world.rank(), 4);
  Tensor got = Tensor::empty(shard_shape(w4), DType::f32);
  reader.read_slice("model/w", 0, shard_runs(w4), got);
  EXPECT_EQ(got.to_vector<float>(), rows_of(w4).to_vector<float>());
  world.barrier();
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

TEST_F(GradBuffersMpi, ShardedSaveRefusesDisagreeingRanksEverywhere) {
  Communicator& world = state_->comm(Group::world);
  const std::filesystem::path dir = shared_dir(world, "sharded_bad");
  checkpoint::CheckpointState s;
  s.iteration = 3;
  std::map<std::string, checkpoint::TensorSlice> slices;
  checkpoint::TensorSlice t;
  t.global_shape = {world.rank() == 1 ? 4 : 5};
  t.local = Tensor::zeros(t.global_shape, DType::f32);
  t.write = world.rank() == 0;
  slices.emplace("model/x", t);
  try {
    checkpoint::save_checkpoint_sharded(dir, s, slices, world);
    ADD_FAILURE() << "a tensor of two shapes was saved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model/x'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(checkpoint::checkpoint_file(dir, 3)));
  world.barrier();
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace megatron::train
