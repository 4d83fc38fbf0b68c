// The generation engine: continuous batching over a Decoder, Megatron's sampling and stopping
// rules per request.
#include "megatron/inference/engine.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>

#include "megatron/error.h"

namespace megatron::inference {

struct Engine::Running {
  GenerationRequest request;
  std::shared_ptr<GenerationSink> sink;
  std::unique_ptr<Decoder::Sequence> seq;
  std::mt19937_64 random;
  SamplingParams params;  // top_p decays as tokens come
  std::vector<TokenId> generated;
  TokenId last = 0;         // the newest id: the next step's input
  std::int64_t length = 0;  // ids in the sequence
};

namespace {

// log(sum(exp(row))) over the whole (padded) row, as Megatron's log_softmax of the logits.
double log_sum_exp(std::span<const float> row) {
  const float top = *std::max_element(row.begin(), row.end());
  double sum = 0.0;
  for (const float v : row)
    sum += std::exp(static_cast<double>(v) - top);
  return top + std::log(sum);
}

// The n most likely real-vocabulary ids with their log-probabilities, falling (ties by id).
std::vector<std::pair<TokenId, float>> top_logprobs(std::span<const float> row, std::int64_t vocab,
                                                    std::int64_t n, double lse) {
  std::vector<TokenId> ids(static_cast<std::size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  const auto k = static_cast<std::size_t>(std::min(n, vocab));
  std::partial_sort(
      ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
      [&](TokenId a, TokenId b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  std::vector<std::pair<TokenId, float>> top;
  for (std::size_t i = 0; i < k; ++i)
    top.emplace_back(ids[i], static_cast<float>(row[ids[i]] - lse));
  return top;
}

std::span<const float> row_of(const Tensor& logits, std::int64_t i) {
  const std::int64_t v = logits.size(logits.dim() - 1);
  return {logits.data<float>() + i * v, static_cast<std::size_t>(v)};
}

}  // namespace

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::length:
      return "length";
    case StopReason::eod:
      return "eod";
    case StopReason::eol:
      return "eol";
    case StopReason::double_eol:
      return "double eol";
    case StopReason::stop_string:
      return "stop";
    case StopReason::seq_length:
      return "seq_length";
    case StopReason::cancelled:
      return "cancelled";
  }
  return "?";
}

Engine::Engine(Decoder& decoder, const Tokenizer& tokenizer, std::int64_t vocab_size,
               std::int64_t max_batch)
    : decoder_(decoder), tokenizer_(tokenizer), vocab_(vocab_size), max_batch_(max_batch) {
  if (max_batch < 1) throw Error("generation: the batch holds at least one sequence");
  // Megatron's prevent_newline_after_colon bans the newline's first id after the colon's; a
  // tokenizer that cannot spell them (NullTokenizer's ids as text) has nothing to ban.
  try {
    const std::vector<TokenId> colon = tokenizer.encode(":"), newline = tokenizer.encode("\n");
    if (!colon.empty() && !newline.empty()) {
      colon_ = colon.front();
      newline_ = newline.front();
    }
  } catch (const Error&) {
  }
}

Engine::~Engine() = default;

void Engine::submit(GenerationRequest request, std::shared_ptr<GenerationSink> sink) {
  const auto n = static_cast<std::int64_t>(request.prompt.size());
  if (n == 0) throw Error("generation: an empty prompt (start it with the end-of-document id)");
  if (n > decoder_.max_tokens()) {
    throw Error("generation: the prompt has " + std::to_string(n) +
                " tokens; the model reads at most " + std::to_string(decoder_.max_tokens()));
  }
  auto r = std::make_unique<Running>();
  r->random.seed(request.seed);
  r->params = request.sampling;
  r->request = std::move(request);
  r->sink = std::move(sink);
  {
    const std::lock_guard lock(mutex_);
    waiting_.push_back(std::move(r));
  }
  wake_.notify_one();
}

std::size_t Engine::pending() const {
  const std::lock_guard lock(mutex_);
  return waiting_.size() + running_count_;
}

void Engine::finish(Running& r, StopReason reason, const std::string& error) {
  r.sink->finished(reason, error);
  r.seq.reset();
}

bool Engine::admit(Running& r) {
  const std::vector<TokenId>& prompt = r.request.prompt;
  const auto n = static_cast<std::int64_t>(prompt.size());
  r.seq = decoder_.start();
  const Tensor logits = decoder_.prefill(*r.seq, prompt, r.request.logprobs);
  r.last = prompt.back();
  r.length = n;
  std::span<const float> last =
      logits.dim() == 1 ? row_of(logits.view({1, -1}), 0) : row_of(logits, n - 1);
  if (r.request.logprobs) {
    std::vector<float> lp;
    for (std::int64_t i = 0; i + 1 < n; ++i) {
      const std::span<const float> row = row_of(logits, i);
      lp.push_back(
          static_cast<float>(row[static_cast<std::size_t>(prompt[i + 1])] - log_sum_exp(row)));
    }
    r.sink->prompt_logprobs(std::move(lp));
  }
  if (r.request.tokens_to_generate == 0) {
    finish(r, StopReason::length);
    return false;
  }
  return advance(r, last);
}

bool Engine::advance(Running& r, std::span<const float> logits) {
  if (r.length >= decoder_.max_tokens()) {
    finish(r, StopReason::seq_length);
    return false;
  }
  std::span<const float> sampled = logits;
  std::vector<float> banned;
  if (r.request.prevent_newline_after_colon && r.last == colon_ && newline_ >= 0) {
    banned.assign(logits.begin(), logits.end());
    banned[static_cast<std::size_t>(newline_)] = -1e10f;
    sampled = banned;
  }
  const double uniform = std::uniform_real_distribution<double>(0.0, 1.0)(r.random);
  GenerationSink::Token token;
  token.id = sample_token(sampled, vocab_, r.params, uniform);
  r.params.top_p = decayed_top_p(r.params, r.params.top_p);
  if (token.id == tokenizer_.eod()) {
    finish(r, StopReason::eod);
    return false;
  }
  if (r.request.logprobs || r.request.top_logprobs > 0) {
    const double lse = log_sum_exp(logits);
    token.logprob = static_cast<float>(logits[static_cast<std::size_t>(token.id)] - lse);
    if (r.request.top_logprobs > 0)
      token.top = top_logprobs(logits, vocab_, r.request.top_logprobs, lse);
  }
  r.generated.push_back(token.id);
  r.last = token.id;
  ++r.length;
  r.sink->token(token);

  const GenerationRequest& q = r.request;
  if (q.stop_on_eol || q.stop_on_double_eol || !q.stop.empty()) {
    const std::string text = tokenizer_.decode(r.generated);
    const std::string piece = tokenizer_.decode(std::span<const TokenId>(&r.generated.back(), 1));
    std::optional<StopReason> stop;
    if (q.stop_on_eol && piece.find('\n') != std::string::npos) stop = StopReason::eol;
    if (q.stop_on_double_eol && text.find("\n\n") != std::string::npos)
      stop = StopReason::double_eol;
    for (const std::string& s : q.stop)
      if (!s.empty() && text.find(s) != std::string::npos) stop = StopReason::stop_string;
    if (stop) {
      finish(r, *stop);
      return false;
    }
  }
  if (static_cast<std::int64_t>(r.generated.size()) >= q.tokens_to_generate) {
    finish(r, StopReason::length);
    return false;
  }
  return true;
}

bool Engine::step() {
  bool worked = false;
  for (;;) {  // admit while slots are free
    std::unique_ptr<Running> r;
    {
      const std::lock_guard lock(mutex_);
      if (stopping_ || waiting_.empty() || static_cast<std::int64_t>(running_.size()) >= max_batch_)
        break;
      r = std::move(waiting_.front());
      waiting_.pop_front();
      ++running_count_;
    }
    worked = true;
    try {
      if (admit(*r)) running_.push_back(std::move(r));
    } catch (const std::exception& e) {
      finish(*r, StopReason::cancelled, e.what());
    }
  }
  std::erase_if(running_, [&](const std::unique_ptr<Running>& r) {
    if (!r->sink->cancelled()) return false;
    finish(*r, StopReason::cancelled);
    return true;
  });
  if (!running_.empty()) {
    worked = true;
    std::vector<Decoder::Sequence*> seqs;
    std::vector<TokenId> tokens;
    for (const auto& r : running_) {
      seqs.push_back(r->seq.get());
      tokens.push_back(r->last);
    }
    try {
      const Tensor logits = decoder_.step(seqs, tokens);
      std::vector<bool> going(running_.size());
      for (std::size_t i = 0; i < running_.size(); ++i)
        going[i] = advance(*running_[i], row_of(logits, static_cast<std::int64_t>(i)));
      std::size_t i = 0;
      std::erase_if(running_, [&](const std::unique_ptr<Running>&) { return !going[i++]; });
    } catch (const std::exception& e) {
      for (auto& r : running_)
        finish(*r, StopReason::cancelled, e.what());
      running_.clear();
    }
  }
  const std::lock_guard lock(mutex_);
  running_count_ = running_.size();
  return worked;
}

void Engine::run() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
      if (stopping_) break;
    }
    step();
  }
  std::deque<std::unique_ptr<Running>> left;
  {
    const std::lock_guard lock(mutex_);
    left.swap(waiting_);
  }
  for (auto& r : left)
    finish(*r, StopReason::cancelled, "the server is stopping");
  for (auto& r : running_)
    finish(*r, StopReason::cancelled, "the server is stopping");
  running_.clear();
}

void Engine::stop() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
}

}  // namespace megatron::inference
