// The transfer engine (distributed/transfer/fabric_engine.h) on libfabric's tcp and shm
// providers, two engines in one process: a list of hundreds of writes from several source
// regions to scattered offsets of a peer's region lands byte for byte (the rest untouched);
// messages arrive whole and in order; a write out of a region's range, an unknown provider, a
// peer that is gone and one killed mid-transfer are each an error in one line, within the timeout,
// after which the engine still serves its other peers.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if VITDDP_WITH_LIBFABRIC
#include "distributed/transfer/fabric_engine.h"
#include "framework/core/error.h"
#endif

namespace vitddp {
namespace {

#if VITDDP_WITH_LIBFABRIC
using namespace std::chrono_literals;
using transfer::FabricEngine;
using transfer::FabricOptions;
using transfer::Write;

FabricOptions options_for(const std::string& provider) {
  FabricOptions o;
  o.provider = provider;
  if (provider == "tcp") o.node = "127.0.0.1";
  return o;
}

class FabricEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FabricEngineTest, AListOfScatteredWritesLandsByteForByte) {
  FabricEngine a(options_for(GetParam())), b(options_for(GetParam()));
  const int to_b = a.add_peer(b.address(), 10s);
  b.add_peer(a.address(), 10s);

  // Three source regions of different sizes, one destination; 300 writes of 1 B to 20 KB
  // from random places to disjoint, shuffled places (gaps between them stay untouched).
  std::mt19937_64 rng(7);
  std::vector<std::vector<uint8_t>> src = {std::vector<uint8_t>(1 << 20), std::vector<uint8_t>(300000),
                                           std::vector<uint8_t>(4096)};
  for (auto& r : src)
    for (auto& x : r) x = static_cast<uint8_t>(rng());
  std::vector<uint8_t> dst(8 << 20, 0xAB);
  std::vector<int> src_regions;
  for (auto& r : src) src_regions.push_back(a.register_region(r.data(), r.size(), false));
  const int dst_region = b.register_region(dst.data(), dst.size(), true);
  const transfer::RegionDescriptor d = b.descriptor(dst_region);
  EXPECT_EQ(d.bytes, dst.size());

  std::vector<Write> writes;
  std::vector<uint8_t> want = dst;
  uint64_t cursor = 0;
  for (int i = 0; i < 300; ++i) {
    const size_t r = rng() % src.size();
    const uint64_t bytes = 1 + rng() % std::min<uint64_t>(20000, src[r].size());
    const uint64_t from = rng() % (src[r].size() - bytes + 1);
    cursor += 1 + rng() % 64;  // a gap
    writes.push_back({src_regions[r], from, bytes, to_b, d, cursor});
    std::copy(src[r].begin() + static_cast<std::ptrdiff_t>(from), src[r].begin() + static_cast<std::ptrdiff_t>(from + bytes),
              want.begin() + static_cast<std::ptrdiff_t>(cursor));
    cursor += bytes;
  }
  ASSERT_LT(cursor, dst.size());
  std::shuffle(writes.begin(), writes.end(), rng);
  const uint64_t ticket = a.submit(writes);
  a.wait(ticket, 30s);
  EXPECT_TRUE(dst == want) << "the destination differs from the writes' bytes";
  EXPECT_THROW(a.wait(ticket, 1s), Error);  // a finished list is gone
}

TEST_P(FabricEngineTest, MessagesArriveWholeAndInOrder) {
  FabricEngine a(options_for(GetParam())), b(options_for(GetParam()));
  const int to_b = a.add_peer(b.address(), 10s);
  b.add_peer(a.address(), 10s);
  std::vector<std::vector<uint8_t>> sent;
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, FabricEngine::kMaxMessage}) {
    std::vector<uint8_t> m(n);
    for (size_t i = 0; i < n; ++i) m[i] = static_cast<uint8_t>(i * 31 + n);
    a.send(to_b, m.data(), m.size());
    sent.push_back(m);
  }
  for (const auto& m : sent) EXPECT_EQ(b.recv(10s), m);
  EXPECT_THROW(b.recv(100ms), Error);
  const std::vector<uint8_t> too_big(FabricEngine::kMaxMessage + 1);
  EXPECT_THROW(a.send(to_b, too_big.data(), too_big.size()), Error);
}

TEST_P(FabricEngineTest, WritesOutOfRangeAreRefusedBeforeAnyIsQueued) {
  FabricEngine a(options_for(GetParam())), b(options_for(GetParam()));
  const int to_b = a.add_peer(b.address(), 10s);
  std::vector<uint8_t> src(1000), dst(1000);
  const int s = a.register_region(src.data(), src.size(), false);
  const transfer::RegionDescriptor d = b.descriptor(b.register_region(dst.data(), dst.size(), true));
  auto refused = [&](const std::vector<Write>& w, const std::string& part) {
    try {
      a.submit(w);
    } catch (const Error& e) {
      return std::string(e.what()).find(part) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refused({{s, 0, 10, to_b, d, 0}, {s, 995, 10, to_b, d, 0}}, "write 1 reads 10 bytes at 995 of region"));
  EXPECT_TRUE(refused({{s, 0, 10, to_b, d, 991}}, "writes 10 bytes at 991 of a peer's region of 1000 bytes"));
  EXPECT_TRUE(refused({{7, 0, 10, to_b, d, 0}}, "names region 7, which is not registered"));
  EXPECT_TRUE(refused({{s, 0, 10, 3, d, 0}}, "names peer 3, which was not added"));
  EXPECT_THROW(a.descriptor(s), Error);  // a source-only region has no descriptor to give
}

INSTANTIATE_TEST_SUITE_P(Providers, FabricEngineTest, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(FabricEngine, AnUnknownProviderIsNamed) {
  FabricOptions o;
  o.provider = "verbs";
  try {
    FabricEngine e(o);
    FAIL() << "an engine opened on provider verbs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("provider must be tcp or shm, got 'verbs'"), std::string::npos) << e.what();
  }
}

// A peer whose engine is gone: warming a connection to it, and a list of writes to it, end in an
// error within their timeouts instead of hanging.
TEST(FabricEngine, APeerThatIsGoneIsAnErrorWithinTheTimeout) {
  FabricEngine a(options_for("tcp"));
  std::vector<uint8_t> gone_address;
  transfer::RegionDescriptor d;
  std::vector<uint8_t> dst(1 << 16);
  {
    FabricEngine b(options_for("tcp"));
    gone_address = b.address();
    d = b.descriptor(b.register_region(dst.data(), dst.size(), true));
  }
  const auto start = std::chrono::steady_clock::now();
  bool refused = false;
  int peer = -1;
  try {
    peer = a.add_peer(gone_address, 3s);
  } catch (const Error& e) {
    refused = true;
    EXPECT_NE(std::string(e.what()).find("peer 0"), std::string::npos) << e.what();
  }
  if (!refused) {
    std::vector<uint8_t> src(1 << 16, 1);
    const int s = a.register_region(src.data(), src.size(), false);
    EXPECT_THROW(a.wait(a.submit({{s, 0, src.size(), peer, d, 0}}), 3s), Error);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
}

// A peer killed while a list of writes into it is in flight (another process, SIGKILLed after the
// list is queued): the wait is an error naming the peer within its timeout, not a hang.
TEST(FabricEngine, APeerKilledMidTransferIsAnErrorWithinTheTimeout) {
  constexpr size_t kBytes = 512ull << 20, kPiece = 1ull << 20;
  signal(SIGPIPE, SIG_IGN);  // a socket to the killed peer must be an error, not this process's end
  int to_parent[2];
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the peer: a region to be written into, its address and descriptor sent up
    close(to_parent[0]);
    std::vector<uint8_t> dst(kBytes);
    FabricEngine b(options_for("tcp"));
    const transfer::RegionDescriptor d = b.descriptor(b.register_region(dst.data(), dst.size(), true));
    const std::vector<uint8_t> address = b.address();
    const uint64_t size = address.size();
    bool sent = write(to_parent[1], &d, sizeof(d)) == sizeof(d) && write(to_parent[1], &size, 8) == 8 &&
                write(to_parent[1], address.data(), size) == static_cast<ssize_t>(size);
    if (!sent) _exit(1);
    for (;;) pause();  // its worker gives the writes their progress until the kill
  }
  close(to_parent[1]);
  auto read_all = [&](void* into, size_t bytes) {
    size_t got = 0;
    while (got < bytes) {
      const ssize_t n = read(to_parent[0], static_cast<char*>(into) + got, bytes - got);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return true;
  };
  transfer::RegionDescriptor d;
  uint64_t size = 0;
  std::vector<uint8_t> address;
  const bool told =
      read_all(&d, sizeof(d)) && read_all(&size, 8) && (address.resize(size), read_all(address.data(), size));
  close(to_parent[0]);
  if (!told) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    FAIL() << "the peer process did not send its address";
  }
  FabricEngine a(options_for("tcp"));
  const int peer = a.add_peer(address, 5s);
  std::vector<uint8_t> src(kBytes, 7);
  const int s = a.register_region(src.data(), src.size(), false);
  std::vector<Write> list;
  for (size_t at = 0; at < kBytes; at += kPiece) list.push_back({s, at, kPiece, peer, d, at});
  const uint64_t ticket = a.submit(list);
  std::this_thread::sleep_for(20ms);
  const auto killed = std::chrono::steady_clock::now();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  try {
    a.wait(ticket, 3s);
    ADD_FAILURE() << "a list into a killed peer completed (or finished within 20 ms: make it longer)";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("peer 0"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 6s);
  // The engine goes on with its other peers (a launcher's outlives a lost host: buddy_replicas.h),
  // and the source region is released once the failed list's writes are done with it.
  FabricEngine c(options_for("tcp"));
  const int to_c = a.add_peer(c.address(), 5s);
  std::vector<uint8_t> small(4096, 9), into(4096, 0);
  const transfer::RegionDescriptor dc = c.descriptor(c.register_region(into.data(), into.size(), true));
  a.wait(a.submit({{s, 0, small.size(), to_c, dc, 0}}), 10s);
  EXPECT_TRUE(std::equal(into.begin(), into.end(), src.begin())) << "a list to another peer after the loss";
  a.send(to_c, small.data(), 10);
  EXPECT_EQ(c.recv(5s).size(), 10u);
  EXPECT_TRUE(a.release_region(s, 10s)) << "writes of the failed list still hold the region";
  EXPECT_THROW(a.submit({{s, 0, 10, to_c, dc, 0}}), Error);  // a released region is no source
}
#else
TEST(FabricEngine, NeedsLibfabric) { GTEST_SKIP() << "no libfabric at configure time (libfabric-dev): the transfer engine is not built"; }
#endif

}  // namespace
}  // namespace vitddp
