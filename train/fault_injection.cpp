#include "train/fault_injection.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace vitddp {

bool inject_fault(int rank, int64_t step) {
  static const char* spec = std::getenv("VITDDP_FAULT");
  if (!spec) return false;
  int fault_rank = -1;
  long long fault_step = -1;
  char kind[16] = {};
  if (std::sscanf(spec, "%d:%lld:%15s", &fault_rank, &fault_step, kind) != 3) return false;
  if (fault_rank != rank || fault_step != step) return false;
  if (std::string(kind) == "nan") return true;
  if (std::string(kind) == "exit") {
    std::fprintf(stderr, "train: rank %d: VITDDP_FAULT: exiting at step %lld\n", rank, fault_step);
    std::_Exit(7);
  }
  if (std::string(kind) == "kill") std::raise(SIGKILL);
  if (std::string(kind) == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  return false;
}

}  // namespace vitddp
