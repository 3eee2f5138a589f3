// Runs the `train` program as a child process for end-to-end tests.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace vitddp::testing {

struct TrainOutcome {
  int code = -1;        // exit status (-1 when it did not exit normally)
  std::string out;      // stdout and stderr together
  double seconds = 0;   // wall time
  // The run's --json result line (the last output line that is a JSON object); null without one.
  nlohmann::json json() const;
};

// The last line of `out` that parses as a JSON object; null when there is none.
nlohmann::json json_line(const std::string& out);

// `env` is prepended as VAR=value assignments; GPUs are hidden unless `use_gpus`; the run is
// killed after `timeout_s`.
TrainOutcome run_train(const std::string& env, const std::string& args, bool use_gpus = false, int timeout_s = 120);

// Like run_train, but SIGKILLs the whole run (launcher and ranks: it runs in a process group of
// its own) as soon as its output contains `marker`. `killed` says whether the marker was seen.
struct KilledOutcome {
  bool killed = false;
  std::string out;
};
KilledOutcome run_train_until(const std::string& env, const std::string& args, const std::string& marker,
                              bool use_gpus = false, int timeout_s = 120);

}  // namespace vitddp::testing
