// Exit codes of the `train` program, one per kind of failure, so scripts and the launcher can
// tell bad input from a dead peer, a timeout or a numeric fault.
#pragma once

#include "framework/core/error.h"

namespace vitddp {

enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,  // a bug or an unexpected library failure
  kExitBadInput = 2,  // flags, config, files, environment
  kExitPeer = 3,      // another rank failed
  kExitTimeout = 4,   // a collective exceeded --timeout
  kExitNumeric = 5,   // NaN or Inf in loss or gradients
};

ExitCode exit_code_for(ErrorKind kind);

}  // namespace vitddp
