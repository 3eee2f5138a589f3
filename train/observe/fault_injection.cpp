#include "train/observe/fault_injection.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace vitddp {

std::unique_ptr<FaultInjection> FaultInjection::from_environment(int rank) {
  const char* spec = std::getenv("VITDDP_FAULT");
  if (!spec) return nullptr;
  int fault_rank = -1;
  long long fault_step = -1;
  char kind[16] = {};
  if (std::sscanf(spec, "%d:%lld:%15s", &fault_rank, &fault_step, kind) != 3 || fault_rank != rank) return nullptr;
  // "R:S:KIND" strikes the first start only; "R:S:KIND:every" every restart too (restart tests).
  std::string k = kind;
  const size_t colon = k.find(':');
  const bool every_start = colon != std::string::npos && k.substr(colon + 1) == "every";
  if (colon != std::string::npos) k = k.substr(0, colon);
  const char* restart = std::getenv("VITDDP_RESTART");
  if (!every_start && restart && std::string(restart) != "0") return nullptr;
  Kind parsed;
  if (k == "exit") parsed = Kind::kExit;
  else if (k == "kill") parsed = Kind::kKill;
  else if (k == "hang") parsed = Kind::kHang;
  else if (k == "nan") parsed = Kind::kNan;
  else return nullptr;
  return std::unique_ptr<FaultInjection>(new FaultInjection(rank, fault_step, parsed));
}

void FaultInjection::step_begins(int64_t step) {
  if (step != step_) return;
  switch (kind_) {
    case Kind::kExit:
      std::fprintf(stderr, "train: rank %d: VITDDP_FAULT: exiting at step %lld\n", rank_, static_cast<long long>(step));
      std::_Exit(7);
    case Kind::kKill: std::raise(SIGKILL); break;
    case Kind::kHang:
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    case Kind::kNan: break;
  }
}

}  // namespace vitddp
