// Stage settings, resume checks and all-rank error handling of the retrieval pipeline.
#include "pipeline_stage.h"

#include <chrono>
#include <exception>
#include <vector>

#include "megatron/error.h"
#include "megatron/io/array_file.h"

namespace megatron::retro_data {

namespace {

// "[data] key", or "[training] seed" for a key of another table ("training.seed").
std::string config_key(const std::string& key) {
  if (key.rfind("training.", 0) == 0) return "[training] " + key.substr(9);
  return "[data] " + key;
}

}  // namespace

void check_settings(const std::filesystem::path& file, const StageSettings& stored,
                    const StageSettings& wanted) {
  for (const auto& [key, value] : wanted) {
    const auto it = stored.find(key);
    const std::string was = it == stored.end() ? "(not recorded)" : it->second;
    if (was != value) {
      const std::string name = key.rfind("training.", 0) == 0 ? key.substr(9) : key;
      throw ConfigError(config_key(key) + ": the retro workdir's " + file.string() +
                        " was built for " + name + " = " + was + ", the config gives " + value +
                        "; use another retro_workdir, or remove the workdir to rebuild");
    }
  }
  for (const auto& [key, value] : stored) {
    if (!wanted.count(key)) {
      throw ConfigError(config_key(key) + ": the retro workdir's " + file.string() +
                        " was built with " + key + " = " + value +
                        ", which the config does not have; use another retro_workdir");
    }
  }
}

bool stage_file_done(const std::filesystem::path& file, const StageSettings& settings) {
  if (!std::filesystem::exists(file)) return false;
  check_settings(file, io::read_array_attributes(file), settings);
  return true;
}

void on_all_ranks(ParallelState& parallel, const std::string& stage,
                  const std::function<void()>& work) {
  std::exception_ptr failure;
  try {
    work();
  } catch (...) {
    failure = std::current_exception();
  }
  std::vector<std::int32_t> failed{failure ? 1 : 0};
  parallel.comm(Group::world).all_reduce(failed, ReduceOp::max);
  if (failure) std::rethrow_exception(failure);
  if (failed[0] != 0)
    throw Error("retro " + stage + ": another rank failed (its message says why)");
}

void make_own_blocks(ParallelState& parallel, const std::string& stage,
                     const std::vector<std::filesystem::path>& files, const StageSettings& settings,
                     Logger& log, const std::function<BlockWork(std::size_t block)>& make) {
  on_all_ranks(parallel, stage, [&] {
    const auto ranks = static_cast<std::size_t>(parallel.world_size());
    for (auto b = static_cast<std::size_t>(parallel.world_rank()); b < files.size(); b += ranks) {
      if (stage_file_done(files[b], settings)) {
        log.info("retro {}: block {}/{} ({}) already made", stage, b + 1, files.size(),
                 files[b].filename().string());
        continue;
      }
      const auto start = std::chrono::steady_clock::now();
      const BlockWork work = make(b);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      log.info("retro {}: block {}/{}: {} ({:.0f} {}/s)", stage, b + 1, files.size(), work.what,
               work.units / std::max(seconds, 1e-9), work.unit);
    }
  });
}

}  // namespace megatron::retro_data
