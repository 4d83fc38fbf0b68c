// The generation server's routes: request bodies in, engine requests out, answers as Megatron's
// /api and OpenAI's completions shape them (whole, or streamed as server-sent events).
#include "serve/server.h"

#include <httplib.h>

#include <chrono>
#include <random>

#include "megatron/error.h"
#include "serve/channel.h"
#include "serve/page.h"
#include "serve/text.h"

namespace megatron::app::serve {

using inference::StopReason;
using nlohmann::json;
using Channels = std::vector<std::shared_ptr<Channel>>;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);

// JSON text; a byte-level token's incomplete UTF-8 becomes U+FFFD rather than an error.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* finish_reason(StopReason r) {
  return r == StopReason::length || r == StopReason::seq_length ? "length" : "stop";
}

std::vector<TokenId> ids_of(const Channel::Snapshot& s) {
  std::vector<TokenId> ids;
  for (const auto& t : s.tokens)
    ids.push_back(t.id);
  return ids;
}

// Each prompt a request with the job's settings; without a seed each draws its own.
Channels submit(inference::Engine& engine, const Job& job) {
  Channels channels;
  std::random_device device;
  for (const auto& prompt : job.prompts) {
    inference::GenerationRequest q = job.settings;
    q.prompt = prompt;
    if (!job.seeded) q.seed = (static_cast<std::uint64_t>(device()) << 32) | device();
    channels.push_back(std::make_shared<Channel>());
    engine.submit(std::move(q), channels.back());
  }
  return channels;
}

std::vector<Channel::Snapshot> wait_all(const Channels& channels) {
  std::vector<Channel::Snapshot> out;
  for (const auto& c : channels) {
    out.push_back(c->wait_done());
    if (!out.back().error.empty()) throw Error("generation failed: " + out.back().error);
  }
  return out;
}

// OpenAI's error object.
std::string openai_error(const std::string& message, const char* type) {
  return dump(
      {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}});
}

// What one prompt's completion says, before it is shaped for an endpoint.
struct Completion {
  std::string text;  // generated, cut at a stop string
  std::vector<TokenId> generated;
  std::string finish;
};

Completion completion_of(const Tokenizer& tok, const Job& job, const Channel::Snapshot& s) {
  Completion c;
  c.generated = ids_of(s);
  c.text = cut_at_stop(tok.decode(c.generated), job.settings.stop);
  c.finish = finish_reason(s.reason);
  return c;
}

// OpenAI's completions logprobs object: tokens, token_logprobs, top_logprobs, text_offset (the
// prompt's first when echoed, without a log-probability).
json completion_logprobs(const Tokenizer& tok, const Job& job, std::size_t i,
                         const Channel::Snapshot& s) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  std::size_t offset = 0;
  auto add = [&](TokenId id, json lp, json top) {
    const std::string piece = tok.decode(std::span<const TokenId>(&id, 1));
    tokens.push_back(piece);
    lps.push_back(std::move(lp));
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += piece.size();
  };
  if (job.echo) {
    const auto& prompt = job.prompts[i];
    for (std::size_t k = 0; k < prompt.size(); ++k)
      add(prompt[k], k == 0 ? json(nullptr) : json(s.prompt_logprobs.at(k - 1)), nullptr);
  } else {
    offset = job.prompt_texts[i].size();
  }
  for (const auto& t : s.tokens) {
    json top = json::object();
    for (const auto& [id, lp] : t.top)
      top[tok.decode(std::span<const TokenId>(&id, 1))] = lp;
    add(t.id, t.logprob, std::move(top));
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

json usage(const Job& job, const std::vector<Channel::Snapshot>& done) {
  std::size_t prompt = 0, generated = 0;
  for (std::size_t i = 0; i < done.size(); ++i) {
    prompt += job.prompts[i].size();
    generated += done[i].tokens.size();
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", generated},
          {"total_tokens", prompt + generated}};
}

// Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs}]}.
json chat_logprobs(const Tokenizer& tok, const Channel::Snapshot& s) {
  auto entry = [&](TokenId id, float lp) {
    const std::string piece = tok.decode(std::span<const TokenId>(&id, 1));
    return json{
        {"token", piece}, {"logprob", lp}, {"bytes", std::vector<int>(piece.begin(), piece.end())}};
  };
  json content = json::array();
  for (const auto& t : s.tokens) {
    json e = entry(t.id, t.logprob);
    e["top_logprobs"] = json::array();
    for (const auto& [id, lp] : t.top)
      e["top_logprobs"].push_back(entry(id, lp));
    content.push_back(std::move(e));
  }
  return {{"content", content}};
}

// A stream's progress through its prompts' tokens: the text each has sent.
struct StreamProgress {
  Channels channels;
  std::vector<std::size_t> sent_tokens, sent_bytes;
  std::vector<bool> finished;
  bool role_sent = false, echo_sent = false;
};

}  // namespace

Server::Server(inference::Engine& engine, ModelLimits limits, std::string model_id, Logger& log)
    : engine_(engine),
      limits_(limits),
      model_id_(std::move(model_id)),
      log_(log),
      http_(std::make_unique<httplib::Server>()) {
  // Each waiting request and each stream holds a connection thread while it lasts.
  http_->new_task_queue = [] { return new httplib::ThreadPool(64); };
  http_->set_payload_max_length(16 << 20);
  routes();
}

Server::~Server() {
  stop();
  if (http_thread_.joinable()) http_thread_.join();
}

int Server::bind(const std::string& host, int port) {
  const int bound =
      port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    throw Error("megatron-app serve: cannot listen on " + host + ":" + std::to_string(port) +
                " (in use, or not an address of this machine)");
  }
  return bound;
}

void Server::serve() {
  // The engine on this (the main) thread: under mpirun its decoder's broadcasts are MPI calls,
  // which the main thread makes. HTTP on its own thread; when it stops, so does the engine.
  http_thread_ = std::thread([this] {
    http_->listen_after_bind();
    engine_.stop();
  });
  engine_.run();
  http_->stop();
  http_thread_.join();
}

void Server::stop() {
  stopping_ = true;
  engine_.stop();
  http_->stop();
}

namespace {

// Runs `handle` on the request's JSON body; a bad body or request answers 400 (`error_body`
// shapes the message), a failure 500.
template <typename Handle, typename ErrorBody>
void guarded(const httplib::Request& req, httplib::Response& res, Logger& log, Handle handle,
             ErrorBody error_body) {
  try {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::parse_error& e) {
      throw BadRequest(std::string("the body is not valid JSON: ") + e.what());
    }
    handle(body);
  } catch (const BadRequest& e) {
    res.status = 400;
    res.set_content(error_body(e.what(), "invalid_request_error"), "application/json");
  } catch (const std::exception& e) {
    log.error("{} {}: {}", req.method, req.path, e.what());
    res.status = 500;
    res.set_content(error_body(e.what(), "server_error"), "application/json");
  }
}

std::string megatron_error(const std::string& message, const char*) {
  return dump(message);
}

}  // namespace

void Server::routes() {
  const Tokenizer& tok = *limits_.tokenizer;
  http_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kPage, "text/html; charset=utf-8");
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(
        dump({{"status", stopping_ ? "stopping" : "ok"}, {"pending_requests", engine_.pending()}}),
        "application/json");
  });
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump({{"object", "list"},
                          {"data",
                           {{{"id", model_id_},
                             {"object", "model"},
                             {"created", 0},
                             {"owned_by", "megatron-app"},
                             {"max_model_len", limits_.seq_length}}}}}),
                    "application/json");
  });

  // Megatron's PUT /api: text (prompt and continuation), segments (each token's text), logprobs.
  http_->Put("/api", [this, &tok](const httplib::Request& req, httplib::Response& res) {
    guarded(
        req, res, log_,
        [&](const json& body) {
          const Job job = parse_api(body, limits_);
          if (!job.no_log) log_.info("request from {}: {}", req.remote_addr, dump(body));
          const std::vector<Channel::Snapshot> done = wait_all(submit(engine_, job));
          json text = json::array(), segments = json::array(), tokens = json::array();
          json logprobs = job.settings.logprobs ? json::array() : json(nullptr);
          for (std::size_t i = 0; i < done.size(); ++i) {
            std::vector<TokenId> all = job.prompts[i];
            const std::vector<TokenId> generated = ids_of(done[i]);
            all.insert(all.end(), generated.begin(), generated.end());
            text.push_back(tok.decode(all));
            json seg = json::array();
            for (const TokenId id : all)
              seg.push_back(tok.decode(std::span<const TokenId>(&id, 1)));
            segments.push_back(std::move(seg));
            tokens.push_back(all);
            if (job.settings.logprobs) {
              std::vector<float> lp = done[i].prompt_logprobs;
              for (const auto& t : done[i].tokens)
                lp.push_back(t.logprob);
              logprobs.push_back(lp);
            }
          }
          res.set_content(dump({{"text", text},
                                {"segments", segments},
                                {"logprobs", logprobs},
                                {"tokens", tokens}}),
                          "application/json");
        },
        megatron_error);
  });

  auto completions = [this, &tok](bool require_max_tokens) {
    return [this, &tok, require_max_tokens](const httplib::Request& req, httplib::Response& res) {
      guarded(
          req, res, log_,
          [&](const json& body) {
            auto job = std::make_shared<Job>(parse_completion(body, limits_, require_max_tokens));
            if (job->model.empty()) job->model = model_id_;
            const std::string id = "cmpl-" + std::to_string(next_id_++);
            const Channels channels = submit(engine_, *job);
            if (job->stream) return stream(res, job, channels, id, false);
            const std::vector<Channel::Snapshot> done = wait_all(channels);
            json choices = json::array();
            for (std::size_t i = 0; i < done.size(); ++i) {
              const Completion c = completion_of(tok, *job, done[i]);
              choices.push_back(
                  {{"index", i},
                   {"text", (job->echo ? job->prompt_texts[i] : "") + c.text},
                   {"logprobs", job->logprobs >= 0 ? completion_logprobs(tok, *job, i, done[i])
                                                   : json(nullptr)},
                   {"finish_reason", c.finish}});
            }
            res.set_content(dump({{"id", id},
                                  {"object", "text_completion"},
                                  {"created", now_seconds()},
                                  {"model", job->model},
                                  {"choices", choices},
                                  {"usage", usage(*job, done)}}),
                            "application/json");
          },
          openai_error);
    };
  };
  http_->Post("/v1/completions", completions(false));
  http_->Post("/completions", completions(true));

  http_->Post(
      "/v1/chat/completions", [this, &tok](const httplib::Request& req, httplib::Response& res) {
        guarded(
            req, res, log_,
            [&](const json& body) {
              auto job = std::make_shared<Job>(parse_chat(body, limits_));
              if (job->model.empty()) job->model = model_id_;
              const std::string id = "chatcmpl-" + std::to_string(next_id_++);
              const Channels channels = submit(engine_, *job);
              if (job->stream) return stream(res, job, channels, id, true);
              const std::vector<Channel::Snapshot> done = wait_all(channels);
              const Completion c = completion_of(tok, *job, done[0]);
              json choice = {
                  {"index", 0},
                  {"message", {{"role", "assistant"}, {"content", c.text}}},
                  {"logprobs", job->logprobs >= 0 ? chat_logprobs(tok, done[0]) : json(nullptr)},
                  {"finish_reason", c.finish}};
              res.set_content(dump({{"id", id},
                                    {"object", "chat.completion"},
                                    {"created", now_seconds()},
                                    {"model", job->model},
                                    {"choices", {choice}},
                                    {"usage", usage(*job, done)}}),
                              "application/json");
            },
            openai_error);
      });
}

void Server::stream(httplib::Response& res, std::shared_ptr<Job> job, Channels channels,
                    const std::string& id, bool chat) {
  auto progress = std::make_shared<StreamProgress>();
  progress->channels = std::move(channels);
  const std::size_t n = progress->channels.size();
  progress->sent_tokens.assign(n, 0);
  progress->sent_bytes.assign(n, 0);
  progress->finished.assign(n, false);
  const Tokenizer& tok = *limits_.tokenizer;
  const std::int64_t created = now_seconds();
  // One server-sent event: a chunk object with `choice` (or usage alone).
  auto event = [=](json choice, json extra = nullptr) {
    json chunk = {{"id", id},
                  {"object", chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created},
                  {"model", job->model},
                  {"choices", choice.is_null() ? json::array() : json::array({choice})}};
    if (!extra.is_null()) chunk["usage"] = extra;
    return "data: " + dump(chunk) + "\n\n";
  };
  auto text_choice = [=](std::size_t i, const std::string& text, json finish) {
    if (chat) {
      json delta = text.empty() && !finish.is_null() ? json::object() : json{{"content", text}};
      return json{{"index", i}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish}};
    }
    return json{{"index", i}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}};
  };
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [=, &tok](std::size_t, httplib::DataSink& sink) {
        auto& p = *progress;
        auto send = [&](const std::string& data) {
          if (!sink.is_writable() || !sink.write(data.data(), data.size())) {
            for (const auto& c : p.channels)
              c->cancel();  // the client went away: free the slots
            return false;
          }
          return true;
        };
        if (chat && !p.role_sent) {
          p.role_sent = true;
          if (!send(event({{"index", 0},
                           {"delta", {{"role", "assistant"}, {"content", ""}}},
                           {"logprobs", nullptr},
                           {"finish_reason", nullptr}})))
            return false;
        }
        if (job->echo && !p.echo_sent) {
          p.echo_sent = true;
          for (std::size_t i = 0; i < n; ++i)
            if (!send(event(text_choice(i, job->prompt_texts[i], nullptr)))) return false;
        }
        bool all_done = true;
        for (std::size_t i = 0; i < n; ++i) {
          if (p.finished[i]) continue;
          const Channel::Snapshot s = p.channels[i]->wait(p.sent_tokens[i], kPoll);
          if (!s.error.empty()) {
            send("data: " + openai_error(s.error, "server_error") + "\n\n");
            return false;
          }
          const std::string text = tok.decode(ids_of(s));
          // Never past a stop string: the engine reports the token that completes one before
          // it reports the request finished, and a snapshot may fall between the two.
          const std::string visible = cut_at_stop(text, job->settings.stop);
          std::size_t ready = s.done ? visible.size()
                                     : std::min(complete_utf8_length(visible),
                                                stop_safe_length(visible, job->settings.stop));
          ready = std::max(ready, p.sent_bytes[i]);
          if (ready > p.sent_bytes[i]) {
            const std::string piece = text.substr(p.sent_bytes[i], ready - p.sent_bytes[i]);
            if (!send(event(text_choice(i, piece, nullptr)))) return false;
            p.sent_bytes[i] = ready;
          }
          p.sent_tokens[i] = s.tokens.size();
          if (s.done) {
            p.finished[i] = true;
            if (!send(event(text_choice(i, "", finish_reason(s.reason))))) return false;
          } else {
            all_done = false;
          }
        }
        if (!all_done) return true;
        if (job->include_usage) {
          std::vector<Channel::Snapshot> snapshots;
          for (const auto& c : p.channels)
            snapshots.push_back(c->wait_done());
          if (!send(event(nullptr, usage(*job, snapshots)))) return false;
        }
        if (!send("data: [DONE]\n\n")) return false;
        sink.done();
        return true;
      },
      [this, progress](bool success) {
        if (success) return;
        log_.info("a client left its stream; its {} request(s) are cancelled",
                  progress->channels.size());
        for (const auto& c : progress->channels)
          c->cancel();
      });
}

}  // namespace megatron::app::serve
