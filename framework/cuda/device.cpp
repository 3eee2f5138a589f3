#include "framework/cuda/device.h"

#include <cuda_runtime.h>

namespace vitddp::cuda {

int visible_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

std::vector<std::string> describe_devices() {
  std::vector<std::string> out;
  for (int i = 0; i < visible_device_count(); ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back(std::to_string(i) + ": " + prop.name + " (" +
                  std::to_string(prop.totalGlobalMem >> 30) + " GiB)");
  }
  return out;
}

bool can_access_peer(int a, int b) {
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess) {
    cudaGetLastError();  // not sticky, but leave no error behind for the next check
    return false;
  }
  return can != 0;
}

}  // namespace vitddp::cuda
