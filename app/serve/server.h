// `megatron-app serve`'s HTTP server (cpp-httplib, Debian's libcpp-httplib-dev: a small blocking
// server with chunked responses for server-sent events, which is all this needs; Boost.Beast
// would mean writing the HTTP plumbing ourselves). Megatron's PUT /api and /completions, the
// OpenAI-compatible /v1/completions and /v1/chat/completions (with `stream`), /v1/models,
// /health and a page at /, over the generation engine (on the main thread; HTTP on its own).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "megatron/inference/engine.h"
#include "megatron/log.h"
#include "serve/requests.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace megatron::app::serve {

class Channel;

class Server {
 public:
  // `model_id`: the name /v1/models gives.
  Server(inference::Engine& engine, ModelLimits limits, std::string model_id, Logger& log);
  ~Server();

  // Binds (port 0: any free port); returns the port, or throws Error naming host and port.
  int bind(const std::string& host, int port);
  // Runs the engine here and HTTP on a thread until stop().
  void serve();
  // Any thread (a signal watcher): stops serving; streams in flight end.
  void stop();

 private:
  void routes();
  // Answers with server-sent events: each prompt's text as it comes (OpenAI's chunk objects;
  // `chat`: chat.completion.chunk deltas), its finish reason, usage if asked, then [DONE].
  void stream(httplib::Response& res, std::shared_ptr<Job> job,
              std::vector<std::shared_ptr<Channel>> channels, const std::string& id, bool chat);

  inference::Engine& engine_;
  ModelLimits limits_;
  std::string model_id_;
  Logger& log_;
  std::unique_ptr<httplib::Server> http_;
  std::thread http_thread_;
  std::atomic<std::uint64_t> next_id_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace megatron::app::serve
