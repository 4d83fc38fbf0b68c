// Crash safety under SIGKILL: a child process saves large checkpoints in a loop and is killed at
// different moments (mid tensor write, mid marker update, in later saves); every time, the
// checkpoint the marker names loads and holds exactly what was saved for that iteration.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "checkpoint_test_util.h"

namespace megatron::checkpoint {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::TempDir;

constexpr std::int64_t kElements = 1 << 19;  // 4 tensors x 2 MiB of f32 per checkpoint

float value_at(std::int64_t iteration, int tensor, std::int64_t i) {
  return float(iteration * 1000 + tensor * 100) + float(i % 997) * 0.25f;
}

CheckpointState state_at(std::int64_t iteration) {
  CheckpointState state;
  state.iteration = iteration;
  state.consumed_train_samples = iteration * 16;
  state.int_attributes["check"] = iteration * 7;
  state.config_toml = "iteration = " + std::to_string(iteration) + "\n";
  for (int k = 0; k < 4; ++k) {
    Tensor t = Tensor::empty({kElements}, DType::f32);
    for (std::int64_t i = 0; i < kElements; ++i)
      t.data<float>()[i] = value_at(iteration, k, i);
    state.tensors["model/layer." + std::to_string(k) + ".weight"] = t;
  }
  return state;
}

// The checkpoint the marker names is complete and is the one saved for its iteration.
void verify_latest(const fs::path& dir) {
  const std::optional<std::int64_t> iteration = latest_iteration(dir);
  ASSERT_TRUE(iteration.has_value());
  const CheckpointState loaded = load_checkpoint(dir);
  ASSERT_EQ(loaded.iteration, *iteration);
  EXPECT_EQ(loaded.consumed_train_samples, *iteration * 16);
  EXPECT_EQ(loaded.int_attributes.at("check"), *iteration * 7);
  EXPECT_EQ(loaded.config_toml, "iteration = " + std::to_string(*iteration) + "\n");
  ASSERT_EQ(loaded.tensors.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    const Tensor& t = loaded.tensors.at("model/layer." + std::to_string(k) + ".weight");
    ASSERT_EQ(t.numel(), kElements);
    const float* data = t.data<float>();
    for (std::int64_t i = 0; i < kElements; ++i) {
      if (data[i] != value_at(*iteration, k, i)) {
        FAIL() << "iteration " << *iteration << " tensor " << k << " element " << i << ": "
               << data[i];
      }
    }
  }
}

bool any_partial(const fs::path& dir, const std::string& suffix) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    if (entry.path().filename().string().ends_with(suffix)) return true;
  }
  return false;
}

// Saves iterations first, first + 1, ... forever, keeping the two newest files.
[[noreturn]] void save_forever(const fs::path& dir, std::int64_t first) {
  try {
    for (std::int64_t it = first;; ++it) {
      save_checkpoint(dir, state_at(it));
      std::error_code ignored;
      fs::remove(checkpoint_file(dir, it - 2), ignored);
    }
  } catch (...) {
    _exit(3);
  }
}

// Kill once the child's first checkpoint file is being written (plus a delay: later in that
// write, during its rename or marker update, or in a later save), or once a marker update starts.
enum class KillWhen { writing_file, updating_marker };

void kill_child(const fs::path& dir, KillWhen when, int delay_ms) {
  const std::int64_t first = latest_iteration(dir).value() + 1;
  // Leftovers of the previous kill would satisfy the waits below before the child starts.
  std::error_code ignored;
  fs::remove(fs::path(checkpoint_file(dir, first).string() + ".partial"), ignored);
  fs::remove(fs::path(latest_marker(dir).string() + ".partial"), ignored);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) save_forever(dir, first);

  const auto deadline = Clock::now() + std::chrono::seconds(20);
  const std::string suffix = when == KillWhen::writing_file ? ".h5.partial" : ".txt.partial";
  while (!any_partial(dir, suffix) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status))
      << "the saving child exited early with status " << WEXITSTATUS(status);
  std::cout << "killed the saving child: marker at iteration " << latest_iteration(dir).value()
            << (any_partial(dir, ".h5.partial") ? ", a checkpoint file half written" : "")
            << (any_partial(dir, ".txt.partial") ? ", a marker update under way" : "") << "\n";
  verify_latest(dir);
}

TEST(CheckpointKill, PreviousCheckpointSurvivesSigkill) {
  TempDir dir;
  save_checkpoint(dir.path(), state_at(0));
  for (int delay_ms : {0, 1, 3, 8, 20, 50, 120})
    kill_child(dir.path(), KillWhen::writing_file, delay_ms);
  kill_child(dir.path(), KillWhen::updating_marker, 0);

  // Saving continues where the marker says, and clears what the killed saves left behind.
  const std::int64_t next = latest_iteration(dir.path()).value() + 1;
  save_checkpoint(dir.path(), state_at(next));
  verify_latest(dir.path());
  EXPECT_FALSE(any_partial(dir.path(), ".h5.partial"));
}

}  // namespace
}  // namespace megatron::checkpoint
