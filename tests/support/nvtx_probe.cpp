// The NVTX scenario tests/framework/nvtx_test.cpp watches through the recorder library: a
// program of its own, because nvtx3 looks for its tool once per process, at the first call.
#include "framework/core/nvtx.h"

int main() {
  using namespace vitddp;
  NvtxRange step(nvtx_step_name(7), NvtxColor::kStep);
  { VITDDP_NVTX_RANGE("get batch", NvtxColor::kData); }
  {
    VITDDP_NVTX_RANGE("forward", NvtxColor::kForward);
    nvtx_mark("loss");
  }
  {
    NvtxRange backward("backward", NvtxColor::kBackward);
    {
      NvtxRange allreduce(nvtx_allreduce_name(3, 24 << 20), NvtxColor::kComm);
      NvtxRange compress(nvtx_compress_name(3), NvtxColor::kCompress);
    }
    NvtxRange owner = std::move(backward);  // one pop, from the new owner
  }
  NvtxRange optimizer("optimizer step", NvtxColor::kOptimizer);
  optimizer.end();
  optimizer.end();  // idempotent: no second pop
  return 0;
}
