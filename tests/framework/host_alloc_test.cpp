// framework/core/host_alloc.h: small buffers keep their alignment; large ones are 2 MB aligned
// and advised onto transparent huge pages.
#include "framework/core/host_alloc.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace vitddp {
namespace {

// The VmFlags line of the mapping of /proc/self/smaps that holds `p`.
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = lo <= a && a < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(HostAlloc, SmallBuffersKeepTheirAlignment) {
  for (size_t align : {size_t{64}, size_t{4096}}) {
    void* p = allocate_host(1000, align);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u);
    std::memset(p, 0x5a, 1000);
    free_host(p);
  }
}

TEST(HostAlloc, LargeBuffersAreHugePageAlignedAndAdvised) {
  const size_t bytes = 5 * kHugePage + 12345;
  auto* p = static_cast<unsigned char*>(allocate_host(bytes, 4096));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePage, 0u);
  for (size_t i = 0; i < bytes; i += 4096) p[i] = static_cast<unsigned char>(i / 4096);
  p[bytes - 1] = 7;
  EXPECT_EQ(p[4096 * 3], 3);
  EXPECT_EQ(p[bytes - 1], 7);
  if (std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    EXPECT_NE(vm_flags_of(p).find(" hg"), std::string::npos) << vm_flags_of(p);
  }
  free_host(p);
}

}  // namespace
}  // namespace vitddp
