// Buddy replicas: each node's launcher keeps a copy of another node's newest memory checkpoint,
// so that a host lost whole (its launcher and its /dev/shm with it) is restored from memory too.
//
// Node K pushes the newest step of its memory checkpoint folder that is whole for all its ranks
// (train/checkpoint/memory_checkpoints.h: one rank-R.safetensors and rank-R.json per rank) to its
// buddy, node (K + 1) % M, through the transfer engine: the files, mapped from /dev/shm as they
// lie, become one list of writes into a region of the buddy's. The buddy keeps two such regions
// per node it holds (Note [Double-buffered replicas] in the .cpp): a push cut short leaves the
// previous replica whole. A launcher that takes a lost node's place (distributed/launcher.h) asks
// that node's buddy for the replica before its ranks start and writes it into its own memory
// checkpoint folder, where the ranks restore it (restored_from "buddy").
//
// Each launcher's engine listens on VITDDP_GLOO_HOST (the address Gloo uses, default
// 127.0.0.1) and publishes its address in the launchers' store; the messages that say what goes
// where are the engine's SEND/RECV messages (small JSON objects).
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

namespace vitddp {

class FileStore;

namespace transfer {

struct BuddyReplicaOptions {
  int node = 0;
  int nnodes = 2;
  std::string memory_folder;  // this node's memory checkpoints (RANKS, step-*/)
  std::string host;           // the address the engine listens on
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // a peer that does not answer within it is left
};

class BuddyReplicas {
 public:
  // Opens the engine and publishes its address in `store` (which must outlive this object).
  // Throws when the engine cannot open (no tcp provider on `host`).
  BuddyReplicas(const BuddyReplicaOptions& options, FileStore& store, std::ostream& log);
  ~BuddyReplicas();  // stops the service thread
  BuddyReplicas(const BuddyReplicas&) = delete;
  BuddyReplicas& operator=(const BuddyReplicas&) = delete;

  // For a launcher that took this node's place: asks the buddy for the node's replica and writes
  // it into the memory folder (step-S/ and a FROM_BUDDY file naming the step). Returns S, or 0
  // when the buddy holds none or does not answer within the timeout (said in the log).
  int64_t fetch_own_replica();
  // Starts the service: pushes this node's new steps to the buddy, keeps the replicas pushed to
  // it, and hands them back to a node's replacement.
  void start();

  // The store key that says which step of `node`'s a buddy holds whole (informational; tests).
  static std::string held_key(int node);
  // ... and which step of `node`'s it is receiving (set when it answers an offer).
  static std::string receiving_key(int node);
  // The file a fetched replica leaves in the memory folder: the step folder's name.
  static constexpr const char* kFromBuddyFile = "FROM_BUDDY";

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace transfer
}  // namespace vitddp
