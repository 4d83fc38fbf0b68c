// Task plugin `collectives`: verifies all-reduce and broadcast on each parallel group against
// values computed from the group's rank list, then times all-reduce (like nccl-tests' busbw).
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "megatron/error.h"
#include "megatron/parallel/parallel_state.h"
#include "megatron/plugin.h"
#include "megatron/task.h"

namespace {

using megatron::Group;

const std::vector<std::string>& group_choices() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (std::size_t g = 0; g < megatron::kGroupCount; ++g) {
      out.emplace_back(megatron::group_name(static_cast<Group>(g)));
    }
    return out;
  }();
  return names;
}

Group group_from_name(const std::string& name) {
  for (std::size_t g = 0; g < megatron::kGroupCount; ++g) {
    if (megatron::group_name(static_cast<Group>(g)) == name) return static_cast<Group>(g);
  }
  throw megatron::Error("unknown group '" + name + "'");
}

void declare_config(megatron::config::TableSchema& s) {
  s.integer_list("elements", {1024, 1 << 20}, "float32 elements per all-reduce, one run per size",
                 megatron::config::Range::at_least(1))
      .integer("iterations", 10, "timed all-reduces per size and group",
               megatron::config::Range::at_least(1))
      .string_list("groups", {"world", "tensor", "pipeline", "data", "context", "model"},
                   "parallel groups to check");
  s.rule([](const megatron::config::ConfigTable& t) {
    for (const auto& g : t.string_list("groups")) {
      bool known = false;
      for (const auto& c : group_choices())
        known = known || c == g;
      if (!known) {
        std::string list;
        for (const auto& c : group_choices())
          list += (list.empty() ? "" : ", ") + c;
        t.fail("groups", "\"" + g + "\" is not a parallel group (groups: " + list + ")");
      }
    }
  });
}

class CollectivesTask final : public megatron::Task {
 public:
  explicit CollectivesTask(megatron::PluginContext& ctx)
      : log_(ctx.log),
        parallel_(ctx.parallel),
        iterations_(ctx.config.integer("iterations")),
        elements_(ctx.config.integer_list("elements")) {
    for (const auto& g : ctx.config.string_list("groups"))
      groups_.push_back(group_from_name(g));
  }

  megatron::TaskResult run(megatron::TaskHost&) override {
    megatron::TaskResult result;
    for (Group g : groups_) {
      if (!parallel_.in_group(g)) continue;
      const auto& ranks = parallel_.group_ranks(g);
      megatron::Communicator& comm = parallel_.comm(g);
      check(g, comm, ranks);
      if (ranks.size() < 2) continue;  // nothing moves: a bandwidth figure would be meaningless
      for (std::int64_t n : elements_) {
        const double busbw = bus_bandwidth(comm, static_cast<std::size_t>(n));
        result.metrics.emplace_back(std::string(megatron::group_name(g)) + " x" +
                                        std::to_string(ranks.size()) + " all-reduce " +
                                        std::to_string(n) + " floats busbw GB/s",
                                    busbw);
      }
    }
    result.metrics.emplace_back("groups_checked", static_cast<double>(groups_.size()));
    return result;
  }

 private:
  // Each rank contributes values derived from its world rank, so the expected sums and maxima
  // follow from the rank list alone: a wrong grouping or a broken transport cannot pass.
  void check(Group g, megatron::Communicator& comm, const std::vector<int>& ranks) {
    const int me = parallel_.world_rank();
    const std::size_t n = 257;  // odd, to catch off-by-one chunking in the transport
    std::vector<double> sum(n), max(n);
    for (std::size_t i = 0; i < n; ++i) {
      sum[i] = (me + 1) * static_cast<double>(i + 1);
      max[i] = static_cast<double>((me * 7 + static_cast<int>(i)) % 13);
    }
    comm.all_reduce(sum, megatron::ReduceOp::sum);
    comm.all_reduce(max, megatron::ReduceOp::max);
    double rank_sum = 0;
    for (int r : ranks)
      rank_sum += r + 1;
    for (std::size_t i = 0; i < n; ++i) {
      double expected_max = 0;
      for (int r : ranks)
        expected_max = std::max(expected_max, double((r * 7 + int(i)) % 13));
      if (sum[i] != rank_sum * static_cast<double>(i + 1) || max[i] != expected_max) {
        throw megatron::Error("collectives: all-reduce on the " +
                              std::string(megatron::group_name(g)) +
                              " group gave a wrong value at element " + std::to_string(i) +
                              " on world rank " + std::to_string(me));
      }
    }
    std::vector<std::int64_t> token(3, comm.rank() == comm.size() - 1 ? ranks.back() : -1);
    comm.broadcast(token, comm.size() - 1);
    for (auto t : token) {
      if (t != ranks.back()) {
        throw megatron::Error("collectives: broadcast on the " +
                              std::string(megatron::group_name(g)) + " group delivered " +
                              std::to_string(t) + " instead of " + std::to_string(ranks.back()) +
                              " on world rank " + std::to_string(me));
      }
    }
    log_.info("collectives: {} group of {} rank(s) checked", megatron::group_name(g), ranks.size());
  }

  // nccl-tests' bus bandwidth for all-reduce: algorithm bandwidth x 2(n-1)/n.
  double bus_bandwidth(megatron::Communicator& comm, std::size_t n) {
    std::vector<float> data(n, 1.0f);
    comm.all_reduce(data);  // warm-up
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < iterations_; ++i)
      comm.all_reduce(data);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double max_seconds = comm.all_reduce_value(seconds, megatron::ReduceOp::max);
    const double per_op = max_seconds / static_cast<double>(iterations_);
    const double size = comm.size();
    const double bytes = static_cast<double>(n * sizeof(float));
    return per_op > 0 ? bytes / per_op * (size > 1 ? 2.0 * (size - 1) / size : 1.0) / 1e9 : 0.0;
  }

  megatron::Logger& log_;
  megatron::ParallelState& parallel_;
  std::int64_t iterations_;
  std::vector<std::int64_t> elements_;
  std::vector<Group> groups_;
};

std::unique_ptr<megatron::Plugin> create(megatron::PluginContext& ctx) {
  return std::make_unique<CollectivesTask>(ctx);
}

const megatron::PluginDescriptor* describe() {
  static const megatron::PluginDescriptor descriptor = megatron::make_plugin_descriptor(
      megatron::PluginKind::task, "collectives", "1.0.0",
      "checks each parallel group's all-reduce and broadcast, and measures bus bandwidth",
      declare_config, create);
  return &descriptor;
}

}  // namespace

MEGATRON_PLUGIN(describe)
