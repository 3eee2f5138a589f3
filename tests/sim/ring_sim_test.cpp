// ring_sim (sim/ring_sim.cpp), the bypass ring in SimGrid: its sums are exact at the paper's
// scale and beyond; without a straggler a step costs T plus one hop, and the plain ring's
// reduce-scatter grows by exactly dT when one rank is late once, also when the chunks it then
// sends in a burst are large (messages to a peer leave in order, not as flows sharing the link); the bypass is taken and pays
// for a transient straggler, and cannot for a persistent one (the slow rank's own reduces bound
// both); a slow rank outside the ring is refused in one line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace vitddp {
namespace {

#ifdef VITDDP_RING_SIM
struct SimRun {
  int code = -1;
  std::string out;
  nlohmann::json json() const { return nlohmann::json::parse(out.substr(out.rfind('{'))); }
};

SimRun sim(const std::string& args) {
  SimRun r;
  FILE* pipe = popen((std::string(VITDDP_RING_SIM) + " " + args + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

double rs_us(const SimRun& r) { return r.json()["reduce_scatter_seconds"].get<double>() * 1e6; }

TEST(RingSim, NoStragglerCostsAHopAndAReducePerStep) {
  const SimRun r = sim("--ranks 8");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(r.json()["exact"].get<bool>());
  EXPECT_EQ(r.json()["skips"], 0);
  // 7 steps of T (3 us) and a hop (5 us and 8 KB over 100 Gbit/s).
  EXPECT_NEAR(rs_us(r), 7 * (3.0 + 5.0 + 8192 / 12.5e3), 0.5) << r.out;
}

TEST(RingSim, ATransientStragglerDelaysThePlainRingByDtAndTheBypassLess) {
  const SimRun none = sim("--ranks 8 --plain");
  const SimRun plain = sim("--ranks 8 --slow 1 --slow-extra-seconds 40e-6 --late-reduce 0 --plain");
  const SimRun bypass = sim("--ranks 8 --slow 1 --slow-extra-seconds 40e-6 --late-reduce 0");
  ASSERT_EQ(plain.code, 0) << plain.out;
  ASSERT_EQ(bypass.code, 0) << bypass.out;
  EXPECT_NEAR(rs_us(plain) - rs_us(none), 40.0, 0.5) << plain.out;
  EXPECT_TRUE(bypass.json()["exact"].get<bool>());
  EXPECT_GT(bypass.json()["skips"].get<int>(), 0) << bypass.out;
  EXPECT_LT(rs_us(bypass), 0.9 * rs_us(plain)) << bypass.out << plain.out;
}

// Waking after 1 ms, rank 1 holds rank 0's next 62 chunks of 328 KB at once. Sent as concurrent
// flows they would share its link and all arrive 0.4 ms later, at every hop of the backlog: the
// plain ring paid about 5 ms for the 1 ms then. In order, the next rank starts on the first
// chunk 7 us later, and the ring loses the delay only.
TEST(RingSim, ALateRanksBurstOfLargeChunksCostsTheDelayOnly) {
  const std::string ring = "--ranks 64 --chunk-bytes 328000 --bandwidth 50e9 --latency-seconds 5e-6 --step-seconds 2.2e-7 --plain";
  const SimRun none = sim(ring);
  const SimRun late = sim(ring + " --slow 1 --slow-extra-seconds 1e-3 --late-reduce 0");
  ASSERT_EQ(late.code, 0) << late.out;
  EXPECT_NEAR(rs_us(late) - rs_us(none), 1000.0, 20.0) << late.out << none.out;
  const double total_extra = (late.json()["allreduce_seconds"].get<double>() - none.json()["allreduce_seconds"].get<double>()) * 1e6;
  EXPECT_NEAR(total_extra, 1000.0, 100.0) << late.out << none.out;
}

TEST(RingSim, APersistentStragglerBoundsBoth) {
  const SimRun plain = sim("--ranks 8 --slow 1 --slow-extra-seconds 40e-6 --plain");
  const SimRun bypass = sim("--ranks 8 --slow 1 --slow-extra-seconds 40e-6");
  ASSERT_EQ(bypass.code, 0) << bypass.out;
  // The slow rank's 7 reduces of T + dT each are on every schedule's critical path.
  EXPECT_GE(rs_us(plain), 7 * 43.0);
  EXPECT_GE(rs_us(bypass), 7 * 43.0);
}

TEST(RingSim, ExactOnSixtyFourRanksWithTwoStragglers) {
  const SimRun r = sim("--ranks 64 --slow 3,40 --slow-extra-seconds 30e-6 --late-reduce 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(r.json()["exact"].get<bool>()) << r.out;
  EXPECT_GT(r.json()["skips"].get<int>(), 0) << r.out;
}

TEST(RingSim, ASlowRankOutsideTheRingIsRefused) {
  const SimRun r = sim("--ranks 8 --slow 9");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("slow rank 9 is not in a ring of 8"), std::string::npos) << r.out;
}
#else
TEST(RingSim, NeedsSimGrid) { GTEST_SKIP() << "no SimGrid at configure time (libsimgrid-dev): ring_sim is not built"; }
#endif

}  // namespace
}  // namespace vitddp
