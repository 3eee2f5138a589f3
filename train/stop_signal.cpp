#include "train/stop_signal.h"

namespace vitddp {
namespace {

std::atomic<int> g_stop_signal{0};
void request_stop(int sig) { g_stop_signal.store(sig); }

}  // namespace

int stop_signal() { return g_stop_signal.load(); }

const std::atomic<int>& stop_signal_flag() { return g_stop_signal; }

StopSignalScope::StopSignalScope() {
  g_stop_signal.store(0);
  struct sigaction on_signal {};
  on_signal.sa_handler = request_stop;
  sigemptyset(&on_signal.sa_mask);
  sigaction(SIGINT, &on_signal, &old_int_);
  sigaction(SIGTERM, &on_signal, &old_term_);
}

StopSignalScope::~StopSignalScope() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

}  // namespace vitddp
