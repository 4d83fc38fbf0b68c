// One generation request's results handed from the engine's thread to the HTTP handler that
// waits for them (whole, or token by token for a stream); the handler cancels it when its client
// goes away.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "megatron/inference/engine.h"

namespace megatron::app::serve {

class Channel : public inference::GenerationSink {
 public:
  // What the handler has seen so far (a copy, taken under the lock).
  struct Snapshot {
    std::vector<Token> tokens;
    std::vector<float> prompt_logprobs;
    bool done = false;
    inference::StopReason reason = inference::StopReason::length;
    std::string error;
  };

  void prompt_logprobs(std::vector<float> logprobs) override {
    const std::lock_guard lock(mutex_);
    state_.prompt_logprobs = std::move(logprobs);
  }
  void token(const Token& token) override {
    {
      const std::lock_guard lock(mutex_);
      state_.tokens.push_back(token);
    }
    changed_.notify_all();
  }
  void finished(inference::StopReason reason, const std::string& error) override {
    {
      const std::lock_guard lock(mutex_);
      state_.done = true;
      state_.reason = reason;
      state_.error = error;
    }
    changed_.notify_all();
  }
  bool cancelled() const override { return cancelled_; }
  void cancel() { cancelled_ = true; }

  // Waits (at most `timeout`) until there are more than `seen` tokens or the request is done.
  Snapshot wait(std::size_t seen, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return state_.done || state_.tokens.size() > seen; });
    return state_;
  }
  Snapshot wait_done() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return state_.done; });
    return state_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  Snapshot state_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace megatron::app::serve
