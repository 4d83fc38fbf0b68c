// Stage settings, resume checks and all-rank error handling of the retrieval pipeline.
#include "pipeline_stage.h"

#include <exception>
#include <vector>

#include "megatron/error.h"
#include "megatron/io/array_file.h"

namespace megatron::retro_data {

void check_settings(const std::filesystem::path& file, const StageSettings& stored,
                    const StageSettings& wanted) {
  for (const auto& [key, value] : wanted) {
    const auto it = stored.find(key);
    const std::string was = it == stored.end() ? "(not recorded)" : it->second;
    if (was != value) {
      throw ConfigError("[data] " + key + ": the retro workdir's " + file.string() +
                        " was built for " + key + " = " + was + ", the config gives " + value +
                        "; use another retro_workdir, or remove the workdir to rebuild");
    }
  }
  for (const auto& [key, value] : stored) {
    if (!wanted.count(key)) {
      throw ConfigError("[data] " + key + ": the retro workdir's " + file.string() +
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

}  // namespace megatron::retro_data
