#include "distributed/node_liveness.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ostream>
#include <thread>

#include "distributed/file_store.h"
#include "framework/core/error.h"

namespace vitddp::liveness {

// Note [A lost host]
// Every launcher writes a heartbeat into the store each second. A restart begins with a
// barrier: each launcher says its attempt has ended ("launcher.ended.<a>.<node>", with the time
// it learnt of the failure) and waits for every node's word. A node whose heartbeat stays still
// for kLostAfter is said to be lost, and the barrier waits for its place to be taken, up to the
// join timeout. The same command started on another host does that: finding its place taken
// (or every place, by arrival) while the run goes on, it watches that node's heartbeat for
// kLostAfter and, if it stays still, claims the place once for the attempt in which it was lost
// ("launcher.node.<K>.after-attempt.<a>"), says so as that attempt's failure (so launchers
// still waiting for their ranks stop them), gets the node's memory checkpoints back from its
// buddy, says the attempt has ended on the lost node's behalf and joins the next one. Clocks are
// never compared across hosts: a heartbeat is a counter, watched for change.

namespace {

std::string heartbeat_key(int node) { return "launcher.heartbeat." + std::to_string(node); }

std::string heartbeat_of(const FileStore& store, int node) {
  return store.has(heartbeat_key(node)) ? store.get(heartbeat_key(node), std::chrono::milliseconds(1000)) : "";
}

}  // namespace

std::string started_key(int attempt, int node) {
  return "launcher.started." + std::to_string(attempt) + "." + std::to_string(node);
}
std::string ended_key(int attempt, int node) {
  return "launcher.ended." + std::to_string(attempt) + "." + std::to_string(node);
}
std::string finished_key(int node) { return "launcher.finished." + std::to_string(node); }

Heartbeat::Heartbeat(FileStore& store, int node) : store_(store), node_(node) {
  beat();
  thread_ = std::thread([this] {
    while (!stop_) {
      for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      try {
        beat();
      } catch (const Error&) {  // a store that cannot be written fails the launcher's own calls, louder
      }
    }
  });
}

Heartbeat::~Heartbeat() {
  stop_ = true;
  thread_.join();
}

void Heartbeat::beat() { store_.set(heartbeat_key(node_), std::to_string(getpid()) + "." + std::to_string(++count_)); }

namespace {

// Which of `nodes` have a heartbeat that stays still for kLostAfter.
std::vector<int> still_heartbeats(const FileStore& store, const std::vector<int>& nodes) {
  std::vector<std::string> first;
  for (int n : nodes) first.push_back(heartbeat_of(store, n));
  std::vector<bool> moved(nodes.size(), false);
  const auto until = std::chrono::steady_clock::now() + kLostAfter;
  while (std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (size_t i = 0; i < nodes.size(); ++i) moved[i] = moved[i] || heartbeat_of(store, nodes[i]) != first[i];
  }
  std::vector<int> still;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!moved[i]) still.push_back(nodes[i]);
  return still;
}

}  // namespace

int newest_started_attempt(const FileStore& store, int nnodes) {
  int newest = -1;
  for (int a = 0;; ++a) {
    bool any = false;
    for (int n = 0; n < nnodes && !any; ++n) any = store.has(started_key(a, n));
    if (!any) return newest;
    newest = a;
  }
}

std::optional<std::pair<int, int>> take_lost_place(FileStore& store, int nnodes, const std::vector<int>& candidates,
                                                   std::ostream& log) {
  for (int n = 0; n < nnodes; ++n)
    if (store.has(finished_key(n))) return std::nullopt;  // the run is over
  const int attempt = newest_started_attempt(store, nnodes);
  if (attempt < 0) return std::nullopt;
  log << "launcher: every place of the rendezvous is taken; watching the heartbeats for "
      << kLostAfter.count() << " s for a lost node's place\n";
  log.flush();
  std::vector<int> all;
  for (int n = 0; n < nnodes; ++n) all.push_back(n);
  const std::vector<int> still = still_heartbeats(store, all);
  if (still.size() == all.size()) return std::nullopt;  // no launcher lives: not a run that goes on
  for (int n : candidates)
    if (std::find(still.begin(), still.end(), n) != still.end() &&
        store.claim("launcher.node." + std::to_string(n) + ".after-attempt." + std::to_string(attempt),
                    std::to_string(getpid())))
      return std::make_pair(n, attempt);
  return std::nullopt;
}

std::optional<double> wait_for_every_node(FileStore& store, int nnodes, int self, int attempt, double failure_time,
                                          std::chrono::seconds join_timeout, const std::atomic<int>& stop,
                                          std::ostream& log) {
  store.set(ended_key(attempt, self), std::to_string(failure_time));
  const auto deadline = std::chrono::steady_clock::now() + join_timeout;
  std::vector<std::string> beat(static_cast<size_t>(nnodes));
  std::vector<std::chrono::steady_clock::time_point> moved(static_cast<size_t>(nnodes),
                                                           std::chrono::steady_clock::now());
  std::vector<bool> said(static_cast<size_t>(nnodes), false), ended(static_cast<size_t>(nnodes), false);
  ended[static_cast<size_t>(self)] = true;
  double earliest = failure_time;
  for (;;) {
    bool all = true;
    const auto now = std::chrono::steady_clock::now();
    for (int n = 0; n < nnodes; ++n) {
      const size_t i = static_cast<size_t>(n);
      if (ended[i]) continue;
      if (store.has(ended_key(attempt, n))) {
        const double t = std::atof(store.get(ended_key(attempt, n), std::chrono::milliseconds(1000)).c_str());
        if (t > 0) earliest = std::min(earliest, t);
        ended[i] = true;
        continue;
      }
      all = false;
      const std::string b = heartbeat_of(store, n);
      if (b != beat[i]) {
        beat[i] = b;
        moved[i] = now;
      } else if (!said[i] && now - moved[i] > kLostAfter) {
        log << "launcher: node " + std::to_string(n) + " is lost (its launcher's heartbeat stopped " +
                   std::to_string(kLostAfter.count()) + " s ago): waiting up to " +
                   std::to_string(join_timeout.count()) +
                   " s for its place to be taken (the same command, started on a new host)\n";
        log.flush();
        said[i] = true;
      }
    }
    if (all) return earliest;
    if (now > deadline || stop.load() != 0) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace vitddp::liveness
