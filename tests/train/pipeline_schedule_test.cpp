// Pipeline schedules: hand-worked 1F1B and interleaved orders, a simulated run of every rank's
// schedule (dependencies between stages satisfied, no deadlock, bounded activations), stage
// layer ranges and the configuration errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <tuple>

#include "megatron/error.h"
#include "megatron/train/pipeline_schedule.h"

namespace megatron::train {
namespace {

std::string order(const std::vector<PipelineAction>& actions) {
  std::ostringstream out;
  for (std::size_t i = 0; i < actions.size(); ++i)
    out << (i ? " " : "") << to_string(actions[i]);
  return out.str();
}

PipelineLayout layout(std::int64_t layers, int pp, int vp = 1) {
  PipelineLayout l;
  l.num_layers = layers;
  l.pipeline_size = pp;
  l.virtual_size = vp;
  return l;
}

TEST(PipelineSchedule, OneFOneBByHand) {
  const PipelineLayout l = layout(8, 4);
  // Rank 0 warms up with pp - 1 = 3 forwards; the last rank alternates from the start.
  EXPECT_EQ(order(pipeline_schedule(l, 0, 8)),
            "F0.0 F1.0 F2.0 F3.0 B0.0 F4.0 B1.0 F5.0 B2.0 F6.0 B3.0 F7.0 B4.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(order(pipeline_schedule(l, 2, 8)),
            "F0.0 F1.0 B0.0 F2.0 B1.0 F3.0 B2.0 F4.0 B3.0 F5.0 B4.0 F6.0 B5.0 F7.0 B6.0 B7.0");
  EXPECT_EQ(order(pipeline_schedule(l, 3, 3)), "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0");
  // Fewer micro-batches than the warm-up: all forwards, then all backwards.
  EXPECT_EQ(order(pipeline_schedule(l, 0, 2)), "F0.0 F1.0 B0.0 B1.0");
  // No pipeline: forward and backward per micro-batch.
  EXPECT_EQ(order(pipeline_schedule(layout(4, 1), 0, 3)), "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0");
}

TEST(PipelineSchedule, InterleavedByHand) {
  const PipelineLayout l = layout(8, 2, 2);
  // Warm-up on rank 0: 2 (pp - 1) + (vp - 1) G = 2 + 2 = 4 forwards; groups of G = pp = 2
  // micro-batches run through chunk 0, then chunk 1; backwards take the chunks in reverse.
  EXPECT_EQ(order(pipeline_schedule(l, 0, 4)),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(order(pipeline_schedule(l, 1, 4)),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(order(pipeline_forward_schedule(l, 0, 4)), "F0.0 F1.0 F0.1 F1.1 F2.0 F3.0 F2.1 F3.1");
}

// Runs every rank's schedule with buffered sends: a forward of virtual stage v needs v - 1's
// forward of the same micro-batch, a backward needs its own forward and v + 1's backward.
// Returns the largest number of micro-batches any rank held activations for at once.
std::int64_t simulate(const PipelineLayout& l, std::int64_t m) {
  const int pp = l.pipeline_size, vp = l.virtual_size, stages = pp * vp;
  std::vector<std::vector<PipelineAction>> schedules;
  for (int r = 0; r < pp; ++r) {
    schedules.push_back(pipeline_schedule(l, r, m));
    EXPECT_EQ(schedules.back().size(), static_cast<std::size_t>(2 * m * vp)) << "rank " << r;
  }
  std::set<std::tuple<int, std::int64_t, int>> done;  // (op, micro-batch, virtual stage)
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  std::vector<std::int64_t> live(static_cast<std::size_t>(pp), 0);
  std::int64_t peak = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      auto& i = next[static_cast<std::size_t>(r)];
      if (i == schedules[static_cast<std::size_t>(r)].size()) continue;
      const PipelineAction a = schedules[static_cast<std::size_t>(r)][i];
      const int v = a.chunk * pp + r;  // chunk c of rank r is virtual stage c * pp + r
      const int f = static_cast<int>(PipelineOp::forward),
                b = static_cast<int>(PipelineOp::backward);
      bool ready;
      if (a.op == PipelineOp::forward) {
        ready = v == 0 || done.count({f, a.micro_batch, v - 1});
      } else {
        ready = done.count({f, a.micro_batch, v}) &&
                (v == stages - 1 || done.count({b, a.micro_batch, v + 1}));
      }
      if (!ready) continue;
      EXPECT_TRUE(done.insert({static_cast<int>(a.op), a.micro_batch, v}).second)
          << "rank " << r << " runs " << to_string(a) << " twice";
      live[static_cast<std::size_t>(r)] += a.op == PipelineOp::forward ? 1 : -1;
      peak = std::max(peak, live[static_cast<std::size_t>(r)]);
      ++i;
      progress = true;
    }
  }
  for (int r = 0; r < pp; ++r) {
    EXPECT_EQ(next[static_cast<std::size_t>(r)], schedules[static_cast<std::size_t>(r)].size())
        << "deadlock: rank " << r << " stuck before "
        << to_string(schedules[static_cast<std::size_t>(r)][next[static_cast<std::size_t>(r)]]);
  }
  return peak;
}

TEST(PipelineSchedule, EveryLayoutRunsToCompletion) {
  for (int pp : {1, 2, 3, 4}) {
    for (std::int64_t m : {1, 2, 3, 4, 7, 8, 16}) {
      SCOPED_TRACE("pp " + std::to_string(pp) + " m " + std::to_string(m));
      const std::int64_t peak = simulate(layout(12, pp), m);
      // 1F1B's point: at most pp micro-batches in flight, however many there are.
      EXPECT_LE(peak, std::min<std::int64_t>(pp, m));
    }
  }
  for (int pp : {2, 3, 4}) {
    for (int vp : {2, 3}) {
      for (std::int64_t m : {pp, 2 * pp, 3 * pp}) {
        SCOPED_TRACE("pp " + std::to_string(pp) + " vp " + std::to_string(vp) + " m " +
                     std::to_string(m));
        simulate(layout(pp * vp * 2, pp, vp), m);
      }
    }
  }
  PipelineLayout g = layout(16, 2, 2);
  g.microbatch_group_size = 3;  // last group of 2 = pp: allowed
  simulate(g, 5);
}

TEST(PipelineSchedule, StageLayers) {
  const PipelineLayout even = layout(8, 4);
  EXPECT_EQ(stage_layers(even, 0).first, 0);
  EXPECT_EQ(stage_layers(even, 3).first, 6);
  EXPECT_EQ(stage_layers(even, 3).count, 2);
  // Interleaved: chunk c on rank r starts at (c pp + r) L / (pp vp).
  const PipelineLayout inter = layout(16, 2, 4);
  EXPECT_EQ(stage_layers(inter, 0, 0).first, 0);
  EXPECT_EQ(stage_layers(inter, 1, 0).first, 2);
  EXPECT_EQ(stage_layers(inter, 0, 1).first, 4);
  EXPECT_EQ(stage_layers(inter, 1, 3).first, 14);
  EXPECT_EQ(stage_layers(inter, 1, 3).count, 2);
  PipelineLayout uneven = layout(10, 4);
  uneven.first_stage_layers = 1;
  uneven.last_stage_layers = 3;
  std::vector<std::int64_t> firsts, counts;
  for (int r = 0; r < 4; ++r) {
    firsts.push_back(stage_layers(uneven, r).first);
    counts.push_back(stage_layers(uneven, r).count);
  }
  EXPECT_EQ(counts, (std::vector<std::int64_t>{1, 3, 3, 3}));
  EXPECT_EQ(firsts, (std::vector<std::int64_t>{0, 1, 4, 7}));
}

void expect_refused(const PipelineLayout& l, std::int64_t m, const std::string& needle) {
  try {
    validate_pipeline(l, m);
    ADD_FAILURE() << "accepted; expected an error containing '" << needle << "'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PipelineSchedule, ConstraintsExplained) {
  expect_refused(layout(10, 4), 4,
                 "num_layers 10 does not divide into pipeline_model_parallel_size 4");
  expect_refused(layout(12, 2, 4), 4, "2 x 4 virtual stages");
  expect_refused(layout(8, 1, 2), 4, "needs pipeline_model_parallel_size > 1");
  expect_refused(layout(8, 2, 2), 1, "groups of 2");
  PipelineLayout g = layout(8, 2, 2);
  g.microbatch_group_size = 3;
  expect_refused(g, 4, "last group of 1");
  PipelineLayout uneven = layout(10, 4);
  uneven.first_stage_layers = 3;
  uneven.last_stage_layers = 4;
  expect_refused(uneven, 4, "leaves 3 layers for 2 middle stage(s)");
  uneven.virtual_size = 2;
  expect_refused(uneven, 4, "not supported");
}

}  // namespace
}  // namespace megatron::train
