// Rank -> group tables worked out by hand from Megatron's rule (first name of the order varies
// fastest), checked against RankGenerator and ParallelState::compute/all_groups without MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/parallel/rank_generator.h"

namespace megatron {
namespace {

using Groups = std::vector<std::vector<int>>;

ParallelSizes sizes(int tp, int pp, int cp = 1, int ep = 1, int etp = 0,
                    std::string order = std::string(kDefaultParallelOrder)) {
  ParallelSizes s;
  s.tensor = tp;
  s.pipeline = pp;
  s.context = cp;
  s.expert = ep;
  s.expert_tensor = etp;
  s.order = std::move(order);
  return s;
}

Groups singletons(int n) {
  Groups out;
  for (int r = 0; r < n; ++r)
    out.push_back({r});
  return out;
}

// Runs `fn` expecting an exception of type E whose message contains every one of `parts`.
template <typename E, typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception containing \"" << parts.front() << "\"";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
    }
  }
}

// The notes' example: 16 GPUs, TP2 CP1 DP2 PP4, default order. Strides: tp 1, dp 2, pp 4.
TEST(RankGenerator, NotesExample16GpusTp2Dp2Pp4) {
  const RankGenerator gen({.tp = 2, .dp = 2, .pp = 4});
  EXPECT_EQ(gen.world_size(), 16);
  EXPECT_EQ(gen.get_ranks("tp"),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(gen.get_ranks("dp"),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(gen.get_ranks("pp"),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(gen.get_ranks("tp-pp"),
            (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  EXPECT_EQ(gen.get_ranks("cp"), singletons(16));
  EXPECT_EQ(gen.get_ranks("dp-cp"), gen.get_ranks("dp"));
  EXPECT_EQ(gen.get_ranks("tp-cp"), gen.get_ranks("tp"));
  EXPECT_EQ(gen.get_ranks("tp-cp-ep-dp-pp"),
            (Groups{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}));
}

TEST(ParallelStateTable, NotesExample16GpusEmbeddingGroups) {
  const ParallelSizes s = sizes(/*tp=*/2, /*pp=*/4);
  EXPECT_EQ(ParallelState::all_groups(16, s, Group::embedding),
            (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(ParallelState::all_groups(16, s, Group::position_embedding),
            (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(ParallelState::all_groups(16, s, Group::model),
            (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
}

// The notes' second example: TP2 CP2 DP2 PP2 on 16. Strides: tp 1, cp 2, dp 4, pp 8.
TEST(RankGenerator, NotesExampleTp2Cp2Dp2Pp2) {
  const RankGenerator gen({.tp = 2, .dp = 2, .pp = 2, .cp = 2});
  EXPECT_EQ(gen.get_ranks("cp"),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(gen.get_ranks("dp"),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(gen.get_ranks("dp-cp"),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  // The token's own spelling does not matter: axes are always taken in the generator's order.
  EXPECT_EQ(gen.get_ranks("cp-dp"), gen.get_ranks("dp-cp"));
  EXPECT_EQ(gen.get_ranks("pp"),
            (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(gen.get_ranks("tp"),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(gen.get_ranks("tp-pp"),
            (Groups{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
  EXPECT_EQ(gen.get_ranks("tp-cp"),
            (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(gen.get_ranks("tp-dp-cp"),
            (Groups{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}));
}

TEST(ParallelStateTable, Tp2Cp2Dp2Pp2AllGroupKinds) {
  const ParallelSizes s = sizes(/*tp=*/2, /*pp=*/2, /*cp=*/2);
  EXPECT_EQ(ParallelState::all_groups(16, s, Group::data_context),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(ParallelState::all_groups(16, s, Group::tensor_context),
            (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(ParallelState::all_groups(16, s, Group::embedding),
            (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(ParallelState::all_groups(16, s, Group::position_embedding),
            (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  // Expert layout: etp 2, ep 1, edp 16 / (2 * 1 * 2) = 4, cp 1. Strides: tp 1, dp 2, pp 8.
  EXPECT_EQ(ParallelState::all_groups(16, s, Group::expert), singletons(16));
  EXPECT_EQ(ParallelState::all_groups(16, s, Group::expert_tensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(ParallelState::all_groups(16, s, Group::expert_data),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
}

TEST(ParallelStateTable, World8PureDataParallel) {
  const ParallelSizes s = sizes(1, 1);
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::data), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::data_context),
            (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::tensor), singletons(8));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::pipeline), singletons(8));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::model), singletons(8));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::embedding), singletons(8));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::position_embedding), singletons(8));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::expert_data),
            (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::world), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
}

TEST(ParallelStateTable, World8PureTensorParallel) {
  const ParallelSizes s = sizes(8, 1);
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::tensor), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::model), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::data), singletons(8));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::pipeline), singletons(8));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::expert_tensor),
            (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
}

TEST(ParallelStateTable, World8PurePipelineParallel) {
  const ParallelSizes s = sizes(1, 8);
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::pipeline), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::embedding), (Groups{{0, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::position_embedding), (Groups{{0}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::tensor), singletons(8));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::data), singletons(8));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::model), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
}

// --use-tp-pp-dp-mapping: strides tp 1, pp 2, dp 4.
TEST(ParallelStateTable, World8Tp2Pp2Dp2TpPpDpOrder) {
  const ParallelSizes s = sizes(2, 2, 1, 1, 0, "tp-cp-ep-pp-dp");
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::tensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::pipeline),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::data), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::model), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::embedding),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::position_embedding),
            (Groups{{0}, {1}, {4}, {5}}));
}

// The same sizes with the default order, for contrast: strides tp 1, dp 2, pp 4.
TEST(ParallelStateTable, World8Tp2Pp2Dp2DefaultOrder) {
  const ParallelSizes s = sizes(2, 2);
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::pipeline),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::data), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::model), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
}

// Megatron's own docstring example: tp 2, dp 3, pp 4 (world 24): dp_group[7] = [19, 21, 23].
TEST(RankGenerator, NonPowerOfTwoTp2Dp3Pp4) {
  const RankGenerator gen(/*tp=*/2, /*ep=*/1, /*dp=*/3, /*pp=*/4, /*cp=*/1);
  EXPECT_EQ(gen.get_ranks("dp"), (Groups{{0, 2, 4},
                                         {1, 3, 5},
                                         {6, 8, 10},
                                         {7, 9, 11},
                                         {12, 14, 16},
                                         {13, 15, 17},
                                         {18, 20, 22},
                                         {19, 21, 23}}));
  EXPECT_EQ(gen.get_ranks("pp"), (Groups{{0, 6, 12, 18},
                                         {1, 7, 13, 19},
                                         {2, 8, 14, 20},
                                         {3, 9, 15, 21},
                                         {4, 10, 16, 22},
                                         {5, 11, 17, 23}}));
}

// tp 2 cp 3 on 12 (dp 2). Strides: tp 1, cp 2, dp 6.
TEST(ParallelStateTable, World12Tp2Cp3) {
  const ParallelSizes s = sizes(2, 1, 3);
  EXPECT_EQ(ParallelState::all_groups(12, s, Group::context),
            (Groups{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}));
  EXPECT_EQ(ParallelState::all_groups(12, s, Group::data),
            (Groups{{0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}, {5, 11}}));
  EXPECT_EQ(ParallelState::all_groups(12, s, Group::data_context),
            (Groups{{0, 2, 4, 6, 8, 10}, {1, 3, 5, 7, 9, 11}}));
  EXPECT_EQ(ParallelState::all_groups(12, s, Group::tensor_context),
            (Groups{{0, 1, 2, 3, 4, 5}, {6, 7, 8, 9, 10, 11}}));
}

// pp varies fastest under this order. Strides: pp 1, dp 2, tp 4.
TEST(ParallelStateTable, World8PipelineFastestOrder) {
  const ParallelSizes s = sizes(2, 2, 1, 1, 0, "pp-dp-ep-cp-tp");
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::tensor),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::pipeline),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::data), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  // Inside a tp-pp group pp (leftmost in the order) varies fastest.
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::model), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
}

// Expert layout, world 8, tp 2, ep 2 (etp = tp = 2, edp 2). Expert strides: tp 1, ep 2, dp 4.
TEST(ParallelStateTable, World8Tp2Ep2) {
  const ParallelSizes s = sizes(2, 1, 1, 2);
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::expert),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::expert_tensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::expert_data),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // The dense layout ignores ep: dp 4 with stride 2.
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::data), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::tensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

// world 8, tp 2, ep 4, etp 1 (edp 2). Expert strides: tp 1, ep 1, dp 4.
TEST(ParallelStateTable, World8Tp2Ep4Etp1) {
  const ParallelSizes s = sizes(2, 1, 1, 4, 1);
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::expert), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::expert_tensor), singletons(8));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::expert_data),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::tensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  const GroupTable t = ParallelState::compute(8, 6, s);
  EXPECT_EQ(t.data_parallel_size, 4);
  EXPECT_EQ(t.expert_data_parallel_size, 2);
  EXPECT_EQ(t.sizes.expert_tensor, 1);
  EXPECT_EQ(t[Group::expert].ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(t[Group::expert].rank, 2);
  EXPECT_EQ(t[Group::expert_data].ranks, (std::vector<int>{2, 6}));
  EXPECT_EQ(t[Group::expert_data].rank, 1);
}

// world 8, pp 2, ep 2 (etp 1, edp 2). Expert strides: ep 1, dp 2, pp 4; dense pp stride 4 too.
TEST(ParallelStateTable, World8Pp2Ep2) {
  const ParallelSizes s = sizes(1, 2, 1, 2);
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::expert),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::expert_data),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::pipeline),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(ParallelState::all_groups(8, s, Group::data), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

// Tokens the dense layout never uses, on a generator with both tp and ep: tp 2 ep 2 dp 2 pp 2.
// Strides: tp 1, ep 2, dp 4, pp 8.
TEST(RankGenerator, MultiAxisTokensWithExpertAxis) {
  const RankGenerator gen({.tp = 2, .ep = 2, .dp = 2, .pp = 2});
  EXPECT_EQ(gen.get_ranks("tp-ep-pp"),
            (Groups{{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}}));
  EXPECT_EQ(gen.get_ranks("ep"),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(gen.get_ranks("tp-ep"),
            (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(gen.get_ranks("dp"),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(gen.get_ranks("dp-pp"),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
}

// One rank's view: 16 GPUs, TP2 PP4 DP2. Rank 5 = tp 1, dp 0, pp 1; rank 13 = tp 1, dp 0, pp 3.
TEST(ParallelStateTable, ComputeOneRank) {
  const ParallelSizes s = sizes(2, 4);
  const GroupTable t5 = ParallelState::compute(16, 5, s);
  EXPECT_EQ(t5.world_size, 16);
  EXPECT_EQ(t5.world_rank, 5);
  EXPECT_EQ(t5.data_parallel_size, 2);
  EXPECT_EQ(t5[Group::tensor].ranks, (std::vector<int>{4, 5}));
  EXPECT_EQ(t5[Group::tensor].rank, 1);
  EXPECT_EQ(t5[Group::tensor].index, 2);
  EXPECT_EQ(t5[Group::pipeline].ranks, (std::vector<int>{1, 5, 9, 13}));
  EXPECT_EQ(t5[Group::pipeline].rank, 1);
  EXPECT_EQ(t5[Group::data].ranks, (std::vector<int>{5, 7}));
  EXPECT_EQ(t5[Group::data].rank, 0);
  EXPECT_EQ(t5[Group::model].ranks, (std::vector<int>{0, 1, 4, 5, 8, 9, 12, 13}));
  EXPECT_EQ(t5[Group::model].rank, 3);
  EXPECT_EQ(t5[Group::world].rank, 5);
  EXPECT_EQ(t5[Group::world].size(), 16);
  // A middle stage holds no embedding.
  EXPECT_FALSE(t5[Group::embedding].is_member());
  EXPECT_TRUE(t5[Group::embedding].ranks.empty());
  EXPECT_EQ(t5[Group::embedding].rank, -1);
  EXPECT_FALSE(t5[Group::position_embedding].is_member());

  const GroupTable t13 = ParallelState::compute(16, 13, s);
  EXPECT_EQ(t13[Group::pipeline].rank, 3);
  EXPECT_EQ(t13[Group::embedding].ranks, (std::vector<int>{1, 13}));
  EXPECT_EQ(t13[Group::embedding].rank, 1);
  EXPECT_EQ(t13[Group::embedding].index, 1);
  EXPECT_FALSE(t13[Group::position_embedding].is_member());

  const GroupTable t1 = ParallelState::compute(16, 1, s);
  EXPECT_EQ(t1[Group::embedding].ranks, (std::vector<int>{1, 13}));
  EXPECT_EQ(t1[Group::embedding].rank, 0);
  EXPECT_EQ(t1[Group::position_embedding].ranks, (std::vector<int>{1}));
  EXPECT_EQ(t1[Group::position_embedding].rank, 0);
}

// Property check over many layouts: every kind of group partitions the world (embedding kinds
// excepted), and compute() agrees with all_groups() for every rank.
TEST(ParallelStateTable, ComputeAgreesWithAllGroupsEverywhere) {
  struct Case {
    int world;
    ParallelSizes s;
  };
  const std::vector<Case> cases = {
      {1, sizes(1, 1)},           {8, sizes(2, 2)},
      {16, sizes(2, 2, 2)},       {16, sizes(2, 4)},
      {8, sizes(2, 1, 1, 4, 1)},  {8, sizes(2, 2, 1, 1, 0, "tp-cp-ep-pp-dp")},
      {24, sizes(2, 4)},          {32, sizes(2, 2, 2, 4, 1)},
      {12, sizes(1, 3, 2, 1, 0)}, {16, sizes(4, 2, 1, 2, 2)},
  };
  for (const Case& c : cases) {
    for (std::size_t k = 0; k < kGroupCount; ++k) {
      const auto g = static_cast<Group>(k);
      SCOPED_TRACE("world " + std::to_string(c.world) + " group " + std::string(group_name(g)));
      const Groups groups = ParallelState::all_groups(c.world, c.s, g);
      std::vector<int> seen(static_cast<std::size_t>(c.world), 0);
      for (const auto& grp : groups) {
        for (int r : grp)
          ++seen[static_cast<std::size_t>(r)];
      }
      const bool partial = g == Group::embedding || g == Group::position_embedding;
      for (int r = 0; r < c.world; ++r) {
        EXPECT_LE(seen[static_cast<std::size_t>(r)], 1);
        if (!partial) {
          EXPECT_EQ(seen[static_cast<std::size_t>(r)], 1) << "rank " << r;
        }
        const GroupMembership m = ParallelState::compute(c.world, r, c.s)[g];
        if (!m.is_member()) {
          EXPECT_TRUE(partial);
          continue;
        }
        ASSERT_GE(m.index, 0);
        ASSERT_LT(m.index, static_cast<int>(groups.size()));
        EXPECT_EQ(m.ranks, groups[static_cast<std::size_t>(m.index)]);
        EXPECT_EQ(m.ranks[static_cast<std::size_t>(m.rank)], r);
      }
    }
  }
}

TEST(ParallelStateTable, GroupNames) {
  EXPECT_EQ(group_name(Group::world), "world");
  EXPECT_EQ(group_name(Group::data_context), "data_context");
  EXPECT_EQ(group_name(Group::position_embedding), "position_embedding");
  EXPECT_EQ(kGroupCount, 13u);
}

TEST(ParallelStateErrors, WorldNotDivisibleByModelParallel) {
  expect_error<ConfigError>([] { ParallelState::compute(6, 0, sizes(4, 1)); },
                            {"world size 6 is not divisible by tensor(4) x context(1) x "
                             "pipeline(1) = 4"});
  expect_error<ConfigError>([] { ParallelState::compute(8, 0, sizes(2, 3, 1)); },
                            {"world size 8 is not divisible by tensor(2) x context(1) x "
                             "pipeline(3) = 6"});
  expect_error<ConfigError>([] { ParallelState::all_groups(12, sizes(2, 2, 2), Group::data); },
                            {"world size 12 is not divisible by tensor(2) x context(2) x "
                             "pipeline(2) = 8"});
}

TEST(ParallelStateErrors, WorldNotDivisibleByExpertLayout) {
  expect_error<ConfigError>([] { ParallelState::compute(8, 0, sizes(2, 1, 1, 3)); },
                            {"world size 8 is not divisible by expert_tensor(2) x expert(3) x "
                             "pipeline(1) = 6"});
  expect_error<ConfigError>([] { ParallelState::compute(8, 0, sizes(1, 1, 1, 1, 16)); },
                            {"world size 8 is not divisible by expert_tensor(16) x expert(1) x "
                             "pipeline(1) = 16"});
}

TEST(ParallelStateErrors, SizesBelowOne) {
  expect_error<ConfigError>([] { ParallelState::compute(8, 0, sizes(0, 1)); },
                            {"parallel size tensor must be >= 1, got 0"});
  expect_error<ConfigError>([] { ParallelState::compute(8, 0, sizes(1, -2)); },
                            {"parallel size pipeline must be >= 1, got -2"});
  expect_error<ConfigError>([] { ParallelState::compute(8, 0, sizes(1, 1, 0)); },
                            {"parallel size context must be >= 1, got 0"});
  expect_error<ConfigError>([] { ParallelState::compute(8, 0, sizes(1, 1, 1, 0)); },
                            {"parallel size expert must be >= 1, got 0"});
  expect_error<ConfigError>([] { ParallelState::compute(8, 0, sizes(1, 1, 1, 1, -1)); },
                            {"parallel size expert_tensor must be >= 1", "got -1"});
  expect_error<ConfigError>([] { RankGenerator({.tp = 2, .dp = 0}); },
                            {"size of dp must be >= 1, got 0"});
}

TEST(ParallelStateErrors, BadOrderStrings) {
  expect_error<ConfigError>([] { ParallelState::compute(8, 0, sizes(2, 2, 1, 1, 0, "tp-dp-pp")); },
                            {"invalid parallel order \"tp-dp-pp\"", "missing: cp, ep"});
  expect_error<ConfigError>(
      [] { RankGenerator({}, "tp-cp-ep-dp-dp"); },
      {"invalid parallel order \"tp-cp-ep-dp-dp\"", "repeated: dp", "missing: pp"});
  expect_error<ConfigError>(
      [] { RankGenerator({}, "tp-cp-xp-dp-pp"); },
      {"invalid parallel order \"tp-cp-xp-dp-pp\"", "unknown: xp", "missing: ep"});
  expect_error<ConfigError>([] { RankGenerator({}, ""); },
                            {"invalid parallel order \"\"", "unknown: <empty>"});
  expect_error<ConfigError>([] { RankGenerator({}, "TP-CP-EP-DP-PP"); },
                            {"invalid parallel order \"TP-CP-EP-DP-PP\""});
}

TEST(ParallelStateErrors, NonPipelineLastOrderNeedsEqualExpertDataParallel) {
  // tp 2 pp 2 ep 2 on 8: dp 2 but edp 8 / (2 * 2 * 2) = 1.
  expect_error<ConfigError>(
      [] { ParallelState::compute(8, 0, sizes(2, 2, 1, 2, 0, "tp-cp-ep-pp-dp")); },
      {"parallel order \"tp-cp-ep-pp-dp\" does not end in pp", "expert data-parallel size (1",
       "data-parallel size (2)"});
}

TEST(ParallelStateErrors, WorldRankOutOfRange) {
  expect_error<Error>([] { ParallelState::compute(4, 4, sizes(1, 1)); },
                      {"world rank 4 is outside the world of size 4"});
  expect_error<Error>([] { ParallelState::compute(0, 0, sizes(1, 1)); },
                      {"world size must be >= 1, got 0"});
}

TEST(RankGeneratorErrors, BadTokens) {
  const RankGenerator gen({.tp = 2, .dp = 2});
  expect_error<Error>([&] { gen.get_ranks("tp-xx"); },
                      {"bad group token \"tp-xx\"", "\"xx\" is not one of tp, cp, ep, dp, pp"});
  expect_error<Error>([&] { gen.get_ranks("dp-dp"); }, {"bad group token \"dp-dp\"", "twice"});
  expect_error<Error>([&] { gen.get_ranks(""); }, {"bad group token \"\""});
  expect_error<Error>([&] { gen.size_of("mp"); }, {"unknown parallel dimension \"mp\""});
  EXPECT_EQ(gen.size_of("dp"), 2);
}

TEST(RankGeneratorErrors, ExpertAndContextTogether) {
  expect_error<ConfigError>([] { RankGenerator({.ep = 2, .cp = 2}); },
                            {"ep (2) and cp (2) cannot both be > 1"});
}

}  // namespace
}  // namespace megatron
