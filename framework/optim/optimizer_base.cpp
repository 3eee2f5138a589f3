#include "framework/optim/nonfinite.h"
#include "framework/optim/optimizer.h"

namespace vitddp {

bool Optimizer::skip_on_host() const {
  return skip_flag_.defined() && skip_flag_.device().is_cpu() && skip_flag_.data<int64_t>()[0] != kNoNonfinite;
}

}  // namespace vitddp
