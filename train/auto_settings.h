// The settings the program chooses (Note [Chosen settings] in the .cpp): every expert key that
// changes no bit of the weights and that the user did not give is set here from what the run
// detects (its device, ranks and links) and from what was measured to pay there
// (docs/performance.md). Each choice comes with its reason, which the run prints at start.
// A pure function of its inputs, tested on the CPU.
#pragma once

#include <string>
#include <vector>

#include "train/config.h"

namespace vitddp {

// What a rank knows of its run before the process group exists. Every rank of a run must see
// the same facts, so that every rank chooses the same (the choices decide which collectives run).
struct RunFacts {
  bool gpu = false;             // the training device is a GPU
  int world_size = 1;           // ranks in all
  bool single_host = true;      // every rank on this machine
  // Whether every pair of the run's GPUs has peer access for NCCL; false with the reason in
  // `no_peer_access_why` ("NCCL_P2P_DISABLE=1", "no peer access between GPU 0 and GPU 1").
  bool peer_access = true;
  std::string no_peer_access_why;
  int cpus_per_rank = 1;        // the CPUs this process may use, divided among the ranks of its machine
};

struct ChosenSetting {
  std::string key;     // the expert key or flag, as in train --help-expert
  std::string value;   // as --set would give it
  std::string reason;  // why, in a phrase
};

// Sets every key of `config` that the user did not give (config->is_given) and that these facts
// decide, and returns what it set with the reasons, in the order they are decided. Validates the
// result (a choice never makes a run invalid that the user's settings left valid).
std::vector<ChosenSetting> choose_settings(const RunFacts& facts, TrainConfig* config);

// "NAME VALUE (REASON)" lines for the run's start.
std::string describe_choices(const std::vector<ChosenSetting>& choices);

}  // namespace vitddp
