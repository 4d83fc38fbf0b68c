// `megatron-app serve --config FILE [--load CKPT] [--host H --port P]`: a decoder-only language
// model's checkpoint behind Megatron's REST API and OpenAI-compatible endpoints, decoding the
// requests that arrive together (continuous batching). Under mpirun with tensor and pipeline
// parallelism rank 0 serves and the other ranks follow its decoding. SIGTERM or SIGINT stops it
// cleanly.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <thread>

#include "cli.h"
#include "commands/commands.h"
#include "commands/generation_model.h"
#include "megatron/error.h"
#include "megatron/inference/engine.h"
#include "serve/server.h"

namespace megatron::app {

namespace po = boost::program_options;

namespace {

struct ServeOptions {
  std::string load;
  std::string host = "127.0.0.1";
  int port = 5000;
  std::int64_t max_batch = 8;
  std::string model_name;
  bool recompute = false;
};

po::options_description describe_options(CommonOptions& common, ServeOptions& o) {
  po::options_description d(
      "megatron-app serve --config FILE [--load CKPT] [--host H] [--port P] [options]\n"
      "Serves text generation from the checkpoint of a decoder-only language model of the config\n"
      "(its [data] plugin gives the tokenizer and the sequence length): Megatron's PUT /api and\n"
      "/completions, OpenAI's POST /v1/completions and /v1/chat/completions (\"stream\": true for\n"
      "server-sent events), GET /v1/models, /health, and a page at /. Requests that arrive while\n"
      "others decode join them between steps; each gets the tokens it would get alone. One rank,\n"
      "or mpirun -n TP*PP with [parallel] tensor_model_parallel_size = TP and\n"
      "pipeline_model_parallel_size = PP (rank 0 serves).\n"
      "SIGTERM or SIGINT stops the server.\n\n"
      "Options");
  add_common_options(d, common, true);
  d.add_options()  //
      ("load", po::value(&o.load)->value_name("CKPT"),
       "checkpoint file or directory (default: [checkpoint] load, else save)")  //
      ("host", po::value(&o.host)->default_value("127.0.0.1")->value_name("H"),
       "the address to listen on")  //
      ("port", po::value(&o.port)->default_value(5000)->value_name("P"),
       "the port (0: any free one; the one taken is printed)")  //
      ("max-batch", po::value(&o.max_batch)->default_value(8)->value_name("N"),
       "decode up to N sequences together; more requests wait for a slot")  //
      ("model-name", po::value(&o.model_name)->value_name("NAME"),
       "the model's id in /v1/models (default: the config file's name)")  //
      ("recompute", po::bool_switch(&o.recompute),
       "recompute each whole sequence for each token instead of decoding with the KV cache");
  return d;
}

// The last stop signal received (0: none). A handler, not sigwait: threads that libraries start
// before main (OpenBLAS's pool) do not block signals, and any of them may receive one.
// Static, with its own name: an extern "C" handler's symbol is global to the executable and
// every library, and this one once silently replaced the trainer's of the same name.
volatile std::sig_atomic_t stop_signal = 0;
void on_serve_stop_signal(int sig) {
  stop_signal = sig;
}

// Stops `server` on SIGTERM or SIGINT; returns when the server has stopped for any reason.
class SignalWatcher {
 public:
  SignalWatcher() {
    struct sigaction action = {};
    action.sa_handler = on_serve_stop_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, &old_term_);
    sigaction(SIGINT, &action, &old_int_);
  }
  void start(serve::Server& server, Logger& log) {
    thread_ = std::thread([this, &server, &log] {
      while (!finished_) {
        if (const int sig = stop_signal) {
          log.info("{}: stopping the server", sig == SIGTERM ? "SIGTERM" : "SIGINT");
          server.stop();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  ~SignalWatcher() {
    finished_ = true;
    if (thread_.joinable()) thread_.join();
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
  }

 private:
  struct sigaction old_term_ = {}, old_int_ = {};
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace

int run_serve(MpiRuntime& runtime, const std::vector<std::string>& args) {
  CommonOptions common;
  ServeOptions o;
  const po::options_description description = describe_options(common, o);
  parse_arguments("serve", args, description, common.help);
  if (common.help) {
    std::cout << description << "\n";
    return 0;
  }
  if (o.max_batch < 1) {
    throw UsageError("megatron-app serve: --max-batch: expected 1 or more, found " +
                     std::to_string(o.max_batch));
  }
  if (o.port < 0 || o.port > 65535) {
    throw UsageError("megatron-app serve: --port: expected 0 to 65535, found " +
                     std::to_string(o.port));
  }
  SignalWatcher signals;
  GenerationModel loaded(runtime, common, "serve", o.load, o.recompute);
  if (!loaded.leader()) {  // rank 0 serves; this rank makes its decoder calls with it
    loaded.follow();
    return 0;
  }
  if (o.model_name.empty())
    o.model_name = std::filesystem::path(common.config_file).stem().string();
  inference::Engine engine(loaded.decoder(), loaded.tokenizer(), loaded.vocab_size(), o.max_batch);
  serve::ModelLimits limits{&loaded.tokenizer(), loaded.vocab_size(), loaded.seq_length()};
  serve::Server server(engine, limits, o.model_name, loaded.log());
  const int port = server.bind(o.host, o.port);
  loaded.log().info("serving {} on http://{}:{} (up to {} sequences together)", o.model_name,
                    o.host, port, o.max_batch);
  std::cout << "serving http://" << o.host << ":" << port << std::endl;
  signals.start(server, loaded.log());
  server.serve();
  loaded.log().info("server stopped");
  return 0;
}

}  // namespace megatron::app
