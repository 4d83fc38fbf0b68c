// SIGTERM/SIGINT: the first asks the training loop to save and stop, the second ends at once.
#include <csignal>
#include <cstdlib>

#include "megatron/train/trainer.h"

namespace megatron::train {

namespace {

volatile std::sig_atomic_t g_stop = 0;

// Static: an extern "C" name is global across the executable and every library, where another
// handler of the same name would take its place.
static void on_training_stop_signal(int signal) {
  if (g_stop) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  g_stop = 1;
}

}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGTERM, on_training_stop_signal);
  std::signal(SIGINT, on_training_stop_signal);
}

bool stop_requested() {
  return g_stop != 0;
}

void reset_stop_request() {
  g_stop = 0;
}

}  // namespace megatron::train
