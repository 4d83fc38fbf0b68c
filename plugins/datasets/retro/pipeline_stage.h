// What every stage of the retrieval pipeline shares: the settings its files were made from
// (stored with them, compared on every run), the resume test of a block file, and running a
// piece of work on every rank with the first failure rethrown everywhere.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "megatron/log.h"

#include "megatron/parallel/parallel_state.h"

namespace megatron::retro_data {

// Key (a [data] key, or a stage's own) -> the value its files were made from.
using StageSettings = std::map<std::string, std::string>;

// ConfigError naming the first key whose value in `stored` (read from `file`) differs from
// `wanted`, or which only one of them has.
void check_settings(const std::filesystem::path& file, const StageSettings& stored,
                    const StageSettings& wanted);

// True when `file` exists (files are written whole, so it is complete) and was made from
// `settings`; ConfigError when it was made from others.
bool stage_file_done(const std::filesystem::path& file, const StageSettings& settings);

// Runs `work` on every rank; rethrows on each rank the first failure of any rank (its own
// exception where it failed, an Error naming `stage` elsewhere), so all ranks stop together.
void on_all_ranks(ParallelState& parallel, const std::string& stage,
                  const std::function<void()>& work);

// What making one block did, for the progress log: "dataset 0, documents 80-120", 40,
// "documents".
struct BlockWork {
  std::string what;
  double units = 0;
  std::string unit;
};
// This rank's share of the blocks whose files are `files` (block b goes to rank b % ranks), on
// every rank together (on_all_ranks): a file already made from `settings` is kept (an interrupted
// run resumes), any other is made by `make(b)`, which writes it. Progress and rates are logged.
void make_own_blocks(ParallelState& parallel, const std::string& stage,
                     const std::vector<std::filesystem::path>& files, const StageSettings& settings,
                     Logger& log, const std::function<BlockWork(std::size_t block)>& make);

}  // namespace megatron::retro_data
