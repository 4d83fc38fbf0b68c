// Text generation with continuous batching: requests queue from any thread; the engine's thread
// admits them between decoding steps (each prompt prefilled alone), decodes every running
// sequence one token a step together, samples each with its own random stream and stops each on
// its own rules, so a request's tokens do not depend on what runs beside it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "megatron/inference/decoder.h"
#include "megatron/inference/sampling.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::inference {

// One prompt's generation, with Megatron's options (the REST server's fields).
struct GenerationRequest {
  std::vector<TokenId> prompt;           // at least one id
  std::int64_t tokens_to_generate = 64;  // 0: only the prompt's log-probabilities
  SamplingParams sampling;
  std::uint64_t seed = 0;           // the request's random stream
  bool logprobs = false;            // the prompt's and each generated token's
  std::int64_t top_logprobs = 0;    // also the n most likely ids at each generated token
  bool stop_on_eol = false;         // after a token whose text holds a newline
  bool stop_on_double_eol = false;  // once the generated text holds an empty line
  bool prevent_newline_after_colon = false;
  std::vector<std::string> stop;  // stop strings: ends once the generated text holds one
};

// Why a sequence ended.
enum class StopReason { length, eod, eol, double_eol, stop_string, seq_length, cancelled };
const char* stop_reason_name(StopReason reason);

// Where a request's results go; called on the engine's thread.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // The log-probability of each prompt id after the first, given the ids before it (logprobs).
  virtual void prompt_logprobs(std::vector<float> logprobs) { (void)logprobs; }
  struct Token {
    TokenId id = 0;
    float logprob = 0.0f;                        // log-softmax of the raw logits
    std::vector<std::pair<TokenId, float>> top;  // top_logprobs most likely, falling
  };
  virtual void token(const Token& token) = 0;
  // Last call for this request; `error` non-empty when it failed.
  virtual void finished(StopReason reason, const std::string& error) = 0;
  // Polled between steps: true drops the request (its client went away).
  virtual bool cancelled() const { return false; }
};

class Engine {
 public:
  // `max_batch`: the most sequences decoding together; more wait for a free slot.
  Engine(Decoder& decoder, const Tokenizer& tokenizer, std::int64_t vocab_size,
         std::int64_t max_batch);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Any thread: queues a request. Throws Error when the prompt is empty or leaves no room.
  void submit(GenerationRequest request, std::shared_ptr<GenerationSink> sink);
  // One scheduling step (the engine's thread): admits queued requests while slots are free
  // (prefill and first token), then one decoding step of the running sequences. False when there
  // was nothing to do.
  bool step();
  // Steps until stop(); sleeps while idle.
  void run();
  // Any thread: run() returns after its current step; queued and running requests finish
  // cancelled.
  void stop();
  // Waiting and running requests.
  std::size_t pending() const;

 private:
  struct Running;
  // Prefill and the first token; true when the sequence goes on decoding.
  bool admit(Running& r);
  // Samples the next token from `logits` and reports it; true when the sequence goes on.
  bool advance(Running& r, std::span<const float> logits);
  void finish(Running& r, StopReason reason, const std::string& error = {});

  Decoder& decoder_;
  const Tokenizer& tokenizer_;
  std::int64_t vocab_, max_batch_;
  TokenId colon_ = -1, newline_ = -1;  // prevent_newline_after_colon's ids
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Running>> waiting_;   // guarded by mutex_
  bool stopping_ = false;                          // guarded by mutex_
  std::vector<std::unique_ptr<Running>> running_;  // the engine's thread only
  std::size_t running_count_ = 0;                  // guarded by mutex_ (pending())
};

}  // namespace megatron::inference
