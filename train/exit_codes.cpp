#include "train/exit_codes.h"

namespace vitddp {

ExitCode exit_code_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUser: return kExitBadInput;
    case ErrorKind::kInternal: return kExitInternal;
    case ErrorKind::kPeer: return kExitPeer;
    case ErrorKind::kTimeout: return kExitTimeout;
    case ErrorKind::kNumeric: return kExitNumeric;
  }
  return kExitInternal;
}

}  // namespace vitddp
