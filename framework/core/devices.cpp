#include "framework/core/devices.h"

#if VITDDP_WITH_CUDA
#include "framework/cuda/device.h"
#endif

namespace vitddp {

int visible_gpu_count() {
#if VITDDP_WITH_CUDA
  return cuda::visible_device_count();
#else
  return 0;
#endif
}

}  // namespace vitddp
