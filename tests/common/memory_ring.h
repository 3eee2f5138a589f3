// RingTransport between threads of one process, for the bypass ring's tests: sends are copied
// at once (they complete when posted), receives match the earliest message on their channel and
// tag from any of their ranks. A rank can be made slow: it sleeps before every reduce.
#pragma once

#include <condition_variable>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "distributed/straggler/ring_transport.h"

namespace vitddp::testing {

class MemoryRingWorld {
 public:
  // `timeout_seconds`: how long a wait_any may see nothing complete before it throws.
  explicit MemoryRingWorld(int size, double timeout_seconds = 20);
  ~MemoryRingWorld();
  int size() const { return size_; }
  // The transport of `rank`; owned by the world.
  straggler::RingTransport& transport(int rank);
  // `rank` sleeps this long before each reduce.
  void set_reduce_delay(int rank, double seconds);
  // Messages sent that no receive has taken, and receives still posted: both 0 after a
  // collective whose every message was received.
  size_t undelivered();
  size_t unmatched();

  class Transport;
  class RecvOp;

 private:
  friend class Transport;
  using Key = std::tuple<int, int, uint64_t>;  // (to, channel, tag)
  struct Message {
    int from;
    std::vector<unsigned char> bytes;
  };
  void deliver(int from, int to, straggler::Channel channel, uint64_t tag, const void* data, size_t bytes);
  void post_recv(RecvOp* op);
  void cancel(RecvOp* op);

  const int size_;
  const double timeout_seconds_;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<Key, std::deque<Message>> queued_;   // guarded by mutex_
  std::map<Key, std::deque<RecvOp*>> waiting_;  // guarded by mutex_
  std::vector<std::unique_ptr<Transport>> transports_;
  std::vector<double> delays_;
};

}  // namespace vitddp::testing
