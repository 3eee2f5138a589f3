#include "distributed/wait_board.h"

#include <exception>
#include <sstream>
#include <vector>

#include "distributed/file_store.h"

namespace vitddp {

// Note [Naming the late rank]
// When a collective times out, its ranks know only that they waited; the rank that did not come
// is the interesting one, and beyond two ranks elimination no longer finds it. So each rank posts
// "waiting in #k" under its own key, once per collective and only after waiting longer than
// kWaitReportAfter (from the backend's watch thread; the collective's own is blocked). Sequence
// numbers count a group's collectives in issue order, the same on every rank; a post overwrites
// the last (renamed into place: a reader sees a whole value). On a timeout in #k, a rank whose
// latest post is missing or before #k had not reached it and is named as late; one at #k was
// waiting too (the timeout outlasts kWaitReportAfter, so every such rank has posted); one after
// #k got through (some algorithms let a rank finish first). A rank that arrived within
// kWaitReportAfter of our timeout still counts as late, which it was. With NCCL the sequence is
// the host's enqueue order, so a rank whose GPU hangs after enqueuing #k counts as waiting in #k.

WaitBoard::WaitBoard(const std::string& rendezvous, std::string group, int rank, int world)
    : group_(std::move(group)), rank_(rank), world_(world) {
  if (world > 1 && !rendezvous.empty()) store_ = std::make_unique<FileStore>(rendezvous);
}

WaitBoard::~WaitBoard() = default;

std::string WaitBoard::key_of(int rank) const { return "waiting/" + group_ + "/rank" + std::to_string(rank); }

void WaitBoard::post_waiting(uint64_t seq, const std::string& what) noexcept {
  if (!store_) return;
  try {
    store_->set(key_of(rank_), std::to_string(seq) + "\nrank " + std::to_string(rank_) + " waiting in collective #" +
                                   std::to_string(seq) + " (" + what + ")");
  } catch (const std::exception&) {
  }
}

std::string WaitBoard::describe_late(uint64_t seq) const noexcept {
  if (!store_) return "";
  try {
    std::vector<std::string> late, waiting;
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      std::string why;
      if (!store_->has(key_of(r))) {
        why = "it never waited over " + std::to_string(kWaitReportAfter.count() / 1000) + " s in a collective";
      } else {
        std::istringstream value(store_->get(key_of(r), std::chrono::milliseconds(0)));
        uint64_t posted = 0;
        if (!(value >> posted)) continue;  // unreadable: say nothing about it
        if (posted >= seq) {
          waiting.push_back(std::to_string(r));
          continue;
        }
        why = "its last wait of over " + std::to_string(kWaitReportAfter.count() / 1000) + " s was in #" +
              std::to_string(posted);
      }
      late.push_back("rank " + std::to_string(r) + " had not reached collective #" + std::to_string(seq) + " (" + why +
                     ")");
    }
    std::string out;
    if (late.empty()) {
      out = "every other rank was waiting in collective #" + std::to_string(seq) +
            " too (did the ranks issue different collectives?)";
    } else {
      for (size_t i = 0; i < late.size(); ++i) out += (i ? "; " : "") + late[i];
      if (!waiting.empty()) {
        std::string ranks;
        for (size_t i = 0; i < waiting.size(); ++i) ranks += (i ? ", " : "") + waiting[i];
        out += "; rank" + std::string(waiting.size() > 1 ? "s " : " ") + ranks + (waiting.size() > 1 ? " were" : " was") +
               " waiting in it too";
      }
    }
    return out;
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace vitddp
