// ring_sim: the straggler-aware ring all-reduce (distributed/straggler/bypass_ring.h) in
// SimGrid, at the seed paper's scale: n hosts on a star of split-duplex links (one per host, so a
// message from any rank to any other crosses two: half the hop's latency each, the link's
// bandwidth), SimGrid's CM02 network model (max-min sharing without TCP's corrective factors),
// each reduce of a chunk charged as compute on the rank's host: T on a normal host, T + dT on a
// slow one. One run per process (SimGrid's engine is a singleton); it prints one JSON line.
// scripts/ring_sim_sweep.py runs the paper's sweeps and the DDP table.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "distributed/straggler/bypass_ring.h"
#include "framework/core/error.h"
#include "sim/simgrid_transport.h"

namespace sg4 = simgrid::s4u;

namespace {

struct Args {
  int ranks = 8;
  double chunk_bytes = 8192;       // simulated bytes of one chunk (the paper's 8 KB packet)
  double step_seconds = 3e-6;      // T: reducing one chunk on a normal host
  double slow_extra_seconds = 0;   // dT: what a slow host adds to each reduce
  std::vector<int> slow;           // the slow ranks
  double alpha = 1.5;              // the wait is alpha * T + T_trans
  double latency_seconds = 5e-6;   // one hop
  double bandwidth = 100e9 / 8;    // bytes/s of each host's link
  bool plain = false;              // no bypass
  int late_reduce = -1;            // a slow rank is late at every reduce (-1) or only at this one
  double wait_seconds = -1;        // >= 0: the wait itself, instead of alpha * T + T_trans
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"ring_sim: the straggler-aware ring all-reduce in SimGrid (one run, one JSON line)"};
  app.add_option("--ranks", a.ranks, "ring size")->check(CLI::Range(2, 1024));
  app.add_option("--chunk-bytes", a.chunk_bytes, "simulated bytes of each of the n chunks")->check(CLI::PositiveNumber);
  app.add_option("--step-seconds", a.step_seconds, "T: one chunk's reduce on a normal host")->check(CLI::NonNegativeNumber);
  app.add_option("--slow-extra-seconds", a.slow_extra_seconds, "dT: added to each reduce on a slow host")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--slow", a.slow, "slow ranks")->delimiter(',');
  app.add_option("--alpha", a.alpha, "the wait is alpha * T + T_trans")->check(CLI::PositiveNumber);
  app.add_option("--latency-seconds", a.latency_seconds, "one hop's latency")->check(CLI::NonNegativeNumber);
  app.add_option("--bandwidth", a.bandwidth, "bytes/s of each host's link")->check(CLI::PositiveNumber);
  app.add_flag("--plain", a.plain, "the plain ring (no bypass)");
  app.add_option("--wait-seconds", a.wait_seconds, "the wait itself (default: alpha * T + T_trans)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--late-reduce", a.late_reduce,
                 "a slow rank adds dT to its reduce number K only (from 0); default: to every reduce");
  CLI11_PARSE(app, argc, argv);
  for (int r : a.slow)
    if (r < 0 || r >= a.ranks) {
      std::fprintf(stderr, "ring_sim: slow rank %d is not in a ring of %d\n", r, a.ranks);
      return 2;
    }

  int sg_argc = 3;
  std::string model = "--cfg=network/model:CM02", quiet = "--log=root.thres:critical";
  char* sg_argv[] = {argv[0], model.data(), quiet.data(), nullptr};
  sg4::Engine engine(&sg_argc, sg_argv);

  // Hosts reduce one element per flop, a chunk in T; a slow rank then waits dT more (at every
  // reduce, or at one).
  const double elements_per_chunk = a.chunk_bytes / sizeof(float);
  const double speed = a.step_seconds > 0 ? elements_per_chunk / a.step_seconds : 1e30;
  const std::set<int> slow(a.slow.begin(), a.slow.end());
  auto* zone = sg4::create_star_zone("ring");
  std::vector<sg4::Host*> hosts;
  for (int r = 0; r < a.ranks; ++r) {
    sg4::Host* h = zone->create_host("h" + std::to_string(r), speed)->seal();
    sg4::SplitDuplexLink* link = zone->create_split_duplex_link("l" + std::to_string(r), a.bandwidth);
    link->set_latency(a.latency_seconds / 2)->seal();
    zone->add_route(h->get_netpoint(), nullptr, nullptr, nullptr,
                    {sg4::LinkInRoute(link, sg4::LinkInRoute::Direction::UP)}, true);
    hosts.push_back(h);
  }
  zone->seal();

  // The wait: alpha * T plus one chunk's transfer (latency and bytes over the link).
  const double transfer = a.latency_seconds + a.chunk_bytes / a.bandwidth;
  vitddp::straggler::BypassOptions options;
  options.bypass = !a.plain;
  options.wait_seconds = a.wait_seconds >= 0 ? a.wait_seconds : a.alpha * a.step_seconds + transfer;

  // One float per chunk standing for chunk_bytes: integer values, so the sums are exact.
  std::vector<vitddp::straggler::RingStats> stats(static_cast<size_t>(a.ranks));
  std::vector<int> wrong(static_cast<size_t>(a.ranks), 0);
  for (int r = 0; r < a.ranks; ++r)
    sg4::Actor::create("rank-" + std::to_string(r), hosts[static_cast<size_t>(r)], [&, r] {
      const size_t count = static_cast<size_t>(a.ranks);
      std::vector<float> data(count);
      // Sums below 2^24 up to 1,024 ranks (so exact in f32), and different for chunks of
      // different i % 5 (so a piece added into the wrong chunk shows).
      for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>((r + 1) + 2048 * static_cast<int>(i % 5));
      vitddp::sim::SimGridTransport transport(r, a.ranks, elements_per_chunk, 1.0, a.bandwidth,
                                              vitddp::straggler::ReduceDelay(slow.count(r) ? a.slow_extra_seconds : 0.0,
                                                                             a.late_reduce));
      stats[static_cast<size_t>(r)] = vitddp::straggler::ring_allreduce(transport, data.data(), count, options);
      for (size_t i = 0; i < count; ++i) {
        const double n = a.ranks;
        const double want = n * (n + 1) / 2 + 2048.0 * n * static_cast<double>(i % 5);
        if (static_cast<double>(data[i]) != want) ++wrong[static_cast<size_t>(r)];
      }
    });
  try {
    engine.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ring_sim: the simulation failed: %s\n", e.what());
    return 1;
  }

  nlohmann::json j;
  j["ranks"] = a.ranks;
  j["slow"] = a.slow;
  j["slow_extra_seconds"] = a.slow_extra_seconds;
  j["step_seconds"] = a.step_seconds;
  j["alpha"] = a.alpha;
  j["transfer_seconds"] = transfer;
  j["wait_seconds"] = options.wait_seconds;
  j["chunk_bytes"] = a.chunk_bytes;
  j["bandwidth"] = a.bandwidth;
  j["latency_seconds"] = a.latency_seconds;
  j["bypass"] = options.bypass;
  j["late_reduce"] = a.late_reduce;
  double rs = 0, ag = 0;
  int skips = 0, redirects = 0, forwarded = 0, bad = 0;
  for (size_t r = 0; r < stats.size(); ++r) {
    rs = std::max(rs, stats[r].reduce_scatter_done);
    ag = std::max(ag, stats[r].all_gather_done);
    skips += stats[r].skips;
    redirects += stats[r].redirects;
    forwarded += stats[r].forwarded;
    bad += wrong[r];
  }
  j["reduce_scatter_seconds"] = rs;
  j["allreduce_seconds"] = ag;
  j["skips"] = skips;
  j["redirects"] = redirects;
  j["forwarded"] = forwarded;
  j["exact"] = bad == 0;
  std::cout << j.dump() << std::endl;
  return bad == 0 ? 0 : 1;
}
