// Which launchers live, for several hosts with restarts (Note [A lost host] in the .cpp): each
// launcher's heartbeat in the launchers' store, the barrier that starts a restart, and how a
// launcher started on a new host takes the place of a node whose launcher is lost.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace vitddp {

class FileStore;

namespace liveness {

// A launcher whose heartbeat stays still this long is lost.
constexpr std::chrono::seconds kLostAfter{10};

// The store's keys: node `node` started / ended attempt `attempt`; its launcher is done with the run.
std::string started_key(int attempt, int node);
std::string ended_key(int attempt, int node);
std::string finished_key(int node);

// This launcher's heartbeat: a counter written into the store every second while it lives.
class Heartbeat {
 public:
  Heartbeat(FileStore& store, int node);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void beat();
  FileStore& store_;
  int node_;
  uint64_t count_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The newest attempt any of `nnodes` started; -1 when none has.
int newest_started_attempt(const FileStore& store, int nnodes);

// Takes the place of one of `candidates` whose launcher is lost, in a run that goes on (watching
// every heartbeat for kLostAfter first). Returns {node, the attempt it was lost in}, or nullopt.
std::optional<std::pair<int, int>> take_lost_place(FileStore& store, int nnodes, const std::vector<int>& candidates,
                                                   std::ostream& log);

// Says that node `self`'s `attempt` has ended (at `failure_time`, wall clock) and waits for every
// other node's word, naming a node that is lost once. Returns the earliest failure time of all,
// or nullopt when a lost node's place was not taken within `join_timeout` (or `stop` was set: the
// user's signal).
std::optional<double> wait_for_every_node(FileStore& store, int nnodes, int self, int attempt, double failure_time,
                                          std::chrono::seconds join_timeout, const std::atomic<int>& stop,
                                          std::ostream& log);

}  // namespace liveness
}  // namespace vitddp
