// Device discovery that never throws on a machine without a GPU or driver.
#pragma once

#include <string>
#include <vector>

namespace vitddp::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no device.
int visible_device_count();
// "0: NVIDIA H200 (139 GiB)" per visible device.
std::vector<std::string> describe_devices();
// Whether device a may access device b's memory directly (cudaDeviceCanAccessPeer); false when
// either is not visible or the driver cannot say.
bool can_access_peer(int a, int b);

}  // namespace vitddp::cuda
