// WaitBoard: lets a rank whose collective timed out say which ranks had not arrived. A rank
// that has waited in one collective for longer than kWaitReportAfter posts "waiting in #k" to
// the rendezvous folder's FileStore, under one key per (group, rank); the rank that times out
// reads the others' posts and names those whose latest post is for an earlier collective, or
// who never posted: they are late, hung, dead or busy elsewhere. Nothing is written or read on
// the normal path: a post costs one small file only after a wait of a second, and reading
// happens only on a timeout. See Note [Naming the late rank] in the .cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace vitddp {

class FileStore;

constexpr std::chrono::milliseconds kWaitReportAfter{1000};

class WaitBoard {
 public:
  // `group` names the process group the same way on every rank ("gloo0", "nccl1"). Without a
  // rendezvous folder (one rank) the board does nothing.
  WaitBoard(const std::string& rendezvous, std::string group, int rank, int world);
  ~WaitBoard();
  WaitBoard(const WaitBoard&) = delete;
  WaitBoard& operator=(const WaitBoard&) = delete;

  // This rank has waited in collective #seq (`what`) for longer than kWaitReportAfter. Never
  // throws (a board that cannot be written only makes a later message less precise).
  void post_waiting(uint64_t seq, const std::string& what) noexcept;

  // For a timeout in collective #seq, e.g. "rank 1 had not reached collective #12 (its last
  // wait of over 1 s was in #7); ranks 2, 3 were waiting in it too", or "every other rank was
  // waiting in collective #12 too (did they issue different collectives?)". Never throws.
  std::string describe_late(uint64_t seq) const noexcept;

 private:
  std::string key_of(int rank) const;
  std::unique_ptr<FileStore> store_;  // null: a world of one, or no folder
  std::string group_;
  int rank_ = 0;
  int world_ = 1;
};

}  // namespace vitddp
