#include "distributed/transfer/fabric_engine.h"

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "framework/core/error.h"

namespace vitddp::transfer {
namespace {

// Every libfabric call that returns a status goes through this: a failure is one line naming
// the call and libfabric's reason.
void fi_check(int64_t rc, const char* what) {
  if (rc != 0) throw Error(std::string("libfabric: ") + what + " failed: " + fi_strerror(static_cast<int>(-rc)));
}

void close_quietly(fid_t f, const char* what) {
  if (!f) return;
  const int rc = fi_close(f);
  if (rc != 0) std::fprintf(stderr, "warning: libfabric: closing the %s: %s\n", what, fi_strerror(-rc));
}

constexpr size_t kRecvBuffers = 16, kSendBuffers = 16;
constexpr uint8_t kWarmUp = 0, kUserMessage = 1;  // a message's first byte

}  // namespace

struct FabricEngine::State {
  // An operation's context: libfabric's scratch space first (FI_CONTEXT2 mode), then ours.
  struct Op {
    fi_context2 scratch;
    enum Kind { kWrite, kSend, kRecv } kind = kWrite;
    uint64_t list = 0;     // kWrite
    int peer = 0;
    const char* local = nullptr;
    size_t bytes = 0;
    void* desc = nullptr;
    uint64_t remote_addr = 0, key = 0;
    int region = -1;       // kWrite: the source region
    size_t buffer = 0;     // kSend, kRecv: the pool slot
    std::list<Op>::iterator self;
  };
  struct List {
    size_t total = 0, done = 0;
    int peer = 0;
    std::string error;
  };
  struct Region {
    char* base;
    size_t bytes;
    fid_mr* mr;      // null once released
    bool remote;
    size_t live = 0;  // writes from it queued or posted, not complete
  };

  FabricOptions options;
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  // Counts peers' writes that landed in this engine's regions, where the provider reports them
  // (FI_RMA_EVENT: shm; not tcp;ofi_rxm). Such writes make no completion here, and the provider
  // copies them in this engine's polls: without the count the worker would take a target's
  // polls for idle ones and back off, so each small write waited a sleep.
  fid_cntr* remote_writes = nullptr;
  uint64_t remote_writes_seen = 0;
  bool virt_addr = false;
  size_t max_piece = 0, tx_limit = 0;

  std::mutex mu;
  std::condition_variable cv;
  std::vector<fi_addr_t> peers;
  std::vector<Region> regions;
  uint64_t next_key = 1;
  std::list<Op> ops;                  // every live operation (stable addresses)
  std::deque<Op*> queue;              // writes and sends not posted yet
  size_t in_flight = 0;               // posted writes and sends
  std::map<uint64_t, List> lists;
  uint64_t next_list = 1;
  std::deque<std::vector<uint8_t>> inbox;
  std::string failure;                // a receive or the completion queue failed: every later call says so
  // A peer a message could not reach (its process gone): later calls naming it say so; the
  // engine goes on with the others (a launcher outlives its peers: distributed/transfer/buddy_replicas.h).
  std::map<int, std::string> peer_failure;
  std::map<int, bool> warmed;         // add_peer's warm-up message completed (true) or failed (false)
  std::vector<char> recv_pool, send_pool;
  fid_mr* recv_mr = nullptr;
  fid_mr* send_mr = nullptr;
  std::vector<size_t> free_send;
  // Something a caller may wait for happened (a list finished, a message came, a send slot or a
  // warm-up completed, a failure): the worker wakes the waiters only then, not at every
  // completion, so a waiting thread does not take the worker's core at every write.
  bool wake = false;
  std::atomic<bool> stop{false};
  std::thread worker;

  void* desc_of(fid_mr* mr) { return mr ? fi_mr_desc(mr) : nullptr; }
  // A pool's slot: a message's kind byte, then up to kMaxMessage bytes.
  static char* slot(std::vector<char>& pool, size_t i) { return pool.data() + i * (kMaxMessage + 1); }

  // Queues a message of `kind` to `peer` once a send slot is free. Called with mu held (in `lock`).
  void queue_message(std::unique_lock<std::mutex>& lock, int peer, uint8_t kind, const void* data, size_t bytes) {
    cv.wait(lock, [&] { return !free_send.empty() || !failure.empty(); });
    throw_if_failed();
    throw_if_peer_failed(peer);
    const size_t i = free_send.back();
    free_send.pop_back();
    char* m = slot(send_pool, i);
    m[0] = static_cast<char>(kind);
    if (bytes > 0) std::memcpy(m + 1, data, bytes);
    Op* op = new_op(Op::kSend);
    op->peer = peer;
    op->buffer = i;
    op->bytes = bytes + 1;
    queue.push_back(op);
  }

  // Stops the worker, then closes the endpoint first (its posted operations are cancelled) and
  // the rest in the order they were opened, backwards.
  ~State() {
    stop = true;
    if (worker.joinable()) worker.join();
    close_quietly(ep ? &ep->fid : nullptr, "endpoint");
    for (Region& r : regions) close_quietly(r.mr ? &r.mr->fid : nullptr, "memory region");
    close_quietly(recv_mr ? &recv_mr->fid : nullptr, "receive buffers");
    close_quietly(send_mr ? &send_mr->fid : nullptr, "send buffers");
    close_quietly(av ? &av->fid : nullptr, "address vector");
    close_quietly(remote_writes ? &remote_writes->fid : nullptr, "remote write counter");
    close_quietly(cq ? &cq->fid : nullptr, "completion queue");
    close_quietly(domain ? &domain->fid : nullptr, "domain");
    close_quietly(fabric ? &fabric->fid : nullptr, "fabric");
    if (info) fi_freeinfo(info);
  }

  // A new operation, alive until complete() erases it.
  Op* new_op(Op::Kind kind) {
    ops.emplace_back();
    Op* op = &ops.back();
    op->kind = kind;
    op->self = std::prev(ops.end());
    return op;
  }

  // Posts one operation; -FI_EAGAIN means "later". Called with mu held.
  ssize_t post(Op* op) {
    switch (op->kind) {
      case Op::kWrite:
        return fi_write(ep, op->local, op->bytes, op->desc, peers[static_cast<size_t>(op->peer)], op->remote_addr,
                        op->key, &op->scratch);
      case Op::kSend:
        return fi_send(ep, slot(send_pool, op->buffer), op->bytes, desc_of(send_mr),
                       peers[static_cast<size_t>(op->peer)], &op->scratch);
      case Op::kRecv:
        return fi_recv(ep, slot(recv_pool, op->buffer), kMaxMessage + 1, desc_of(recv_mr),
                       FI_ADDR_UNSPEC, &op->scratch);
    }
    return -FI_EINVAL;
  }

  void post_recv(Op* op) {
    for (;;) {
      const ssize_t rc = post(op);
      if (rc == 0) return;
      if (rc != -FI_EAGAIN) {
        failure = std::string("libfabric: fi_recv failed: ") + fi_strerror(static_cast<int>(-rc));
        return;
      }
      fi_cq_msg_entry e[4];
      const ssize_t n = fi_cq_read(cq, e, 4);
      for (ssize_t i = 0; i < n; ++i) complete(static_cast<Op*>(e[i].op_context), e[i].len, "");
    }
  }

  // An operation finished (error empty) or failed. Called with mu held.
  void complete(Op* op, size_t len, const std::string& error) {
    switch (op->kind) {
      case Op::kWrite: {
        --in_flight;
        if (--regions[static_cast<size_t>(op->region)].live == 0) wake = true;  // release_region waits for it
        auto it = lists.find(op->list);
        if (it != lists.end()) {
          ++it->second.done;
          if (!error.empty() && it->second.error.empty()) it->second.error = error;
          if (it->second.done == it->second.total || !error.empty()) wake = true;
        }
        ops.erase(op->self);
        break;
      }
      case Op::kSend:
        --in_flight;
        wake = true;
        if (!error.empty())
          peer_failure.emplace(op->peer, "a message to peer " + std::to_string(op->peer) + " failed: " + error);
        if (*slot(send_pool, op->buffer) == static_cast<char>(kWarmUp)) warmed[op->peer] = error.empty();
        free_send.push_back(op->buffer);
        ops.erase(op->self);
        break;
      case Op::kRecv:
        wake = true;
        if (!error.empty()) {
          if (!stop) failure = "a receive failed: " + error;
          return;
        }
        if (len >= 1) {
          const char* m = slot(recv_pool, op->buffer);
          if (static_cast<uint8_t>(m[0]) == kUserMessage) inbox.emplace_back(m + 1, m + len);
        }
        post_recv(op);
        break;
    }
  }

  std::string error_text(const fi_cq_err_entry& err) {
    char buf[256] = {};
    const char* prov = fi_cq_strerror(cq, err.prov_errno, err.err_data, buf, sizeof buf);
    return std::string(fi_strerror(err.err)) + (prov && *prov ? std::string(" (") + prov + ")" : "");
  }

  void run() {
    if (options.worker_core >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(options.worker_core, &set);
      const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
      if (rc != 0) std::fprintf(stderr, "warning: transfer worker: cannot pin to core %d\n", options.worker_core);
    }
    int idle = 0;
    while (!stop) {
      bool busy = false;
      {
        std::lock_guard<std::mutex> lock(mu);
        while (!queue.empty() && in_flight < tx_limit) {
          Op* op = queue.front();
          const ssize_t rc = post(op);
          if (rc == -FI_EAGAIN) break;
          queue.pop_front();
          ++in_flight;
          busy = true;
          if (rc != 0) complete(op, 0, fi_strerror(static_cast<int>(-rc)));
        }
        fi_cq_msg_entry e[16];
        const ssize_t n = fi_cq_read(cq, e, 16);
        if (n > 0) {
          for (ssize_t i = 0; i < n; ++i) complete(static_cast<Op*>(e[i].op_context), e[i].len, "");
          busy = true;
        } else if (n == -FI_EAVAIL) {
          fi_cq_err_entry err{};
          if (fi_cq_readerr(cq, &err, 0) == 1 && err.op_context) complete(static_cast<Op*>(err.op_context), 0, error_text(err));
          busy = true;
        } else if (n != -FI_EAGAIN && failure.empty()) {
          failure = std::string("libfabric: fi_cq_read failed: ") + fi_strerror(static_cast<int>(-n));
          wake = true;
        }
        if (remote_writes) {
          const uint64_t landed = fi_cntr_read(remote_writes);
          if (landed != remote_writes_seen) {
            remote_writes_seen = landed;
            busy = true;
          }
        }
        if (wake) cv.notify_all();
        wake = false;
      }
      // The worker also gives software providers their progress: spin while there is work,
      // then back off so an idle engine costs little CPU.
      if (busy) {
        idle = 0;
      } else if (++idle < 200) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  void throw_if_failed() const {
    if (!failure.empty()) throw Error("transfer engine: " + failure);
  }
  void throw_if_peer_failed(int peer) const {
    if (auto it = peer_failure.find(peer); it != peer_failure.end()) throw Error("transfer engine: " + it->second);
  }
  // Takes a failed or abandoned list's writes that are not posted yet off the queue.
  void drop_queued(uint64_t list) {
    for (auto it = queue.begin(); it != queue.end();) {
      Op* op = *it;
      if (op->kind != Op::kWrite || op->list != list) {
        ++it;
        continue;
      }
      --regions[static_cast<size_t>(op->region)].live;
      ops.erase(op->self);
      it = queue.erase(it);
    }
    wake = true;
  }
};

std::string address_text(const std::vector<uint8_t>& address) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : address) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

std::vector<uint8_t> address_from_text(const std::string& text) {
  VITDDP_CHECK(text.size() % 2 == 0, "transfer engine: a peer address of odd length");
  auto nibble = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw Error("transfer engine: a peer address that is not hexadecimal");
  };
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < text.size(); i += 2)
    bytes.push_back(static_cast<uint8_t>(nibble(text[i]) * 16 + nibble(text[i + 1])));
  return bytes;
}

nlohmann::json descriptor_json(const RegionDescriptor& d) { return {{"key", d.key}, {"base", d.base}, {"bytes", d.bytes}}; }

RegionDescriptor descriptor_from_json(const nlohmann::json& j) {
  return {j.at("key").get<uint64_t>(), j.at("base").get<uint64_t>(), j.at("bytes").get<uint64_t>()};
}

FabricEngine::FabricEngine(const FabricOptions& options) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.options = options;
  const std::string prov = options.provider == "tcp" ? "tcp;ofi_rxm" : options.provider == "shm" ? "shm" : "";
  VITDDP_CHECK(!prov.empty(), "transfer engine: provider must be tcp or shm, got '", options.provider, "'");
  fi_info* hints = fi_allocinfo();
  VITDDP_CHECK(hints, "libfabric: fi_allocinfo failed");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  // A write completes once its bytes are in the peer's memory, not when they left: a list that
  // has completed is there to read (tcp otherwise completes at the socket).
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  hints->fabric_attr->prov_name = strdup(prov.c_str());
  auto get_info = [&] {
    return fi_getinfo(FI_VERSION(1, 17), options.node.empty() ? nullptr : options.node.c_str(), nullptr,
                      options.node.empty() ? 0 : FI_SOURCE, hints, &s.info);
  };
  // Counting peers' writes needs FI_RMA_EVENT; a provider without it is taken as it is.
  hints->caps |= FI_RMA_EVENT;
  int rc = get_info();
  if (rc == -FI_ENODATA) {
    hints->caps &= ~FI_RMA_EVENT;
    rc = get_info();
  }
  fi_freeinfo(hints);
  if (rc != 0)
    throw Error("transfer engine: libfabric has no " + prov + " provider for reliable datagrams with RMA" +
                (options.node.empty() ? "" : " on " + options.node) + " here (" + fi_strerror(-rc) + ")");
  try {
    fi_check(fi_fabric(s.info->fabric_attr, &s.fabric, nullptr), "fi_fabric");
    fi_check(fi_domain(s.fabric, s.info, &s.domain, nullptr), "fi_domain");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_MSG;
    cq_attr.size = 4096;
    fi_check(fi_cq_open(s.domain, &cq_attr, &s.cq, nullptr), "fi_cq_open");
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    fi_check(fi_av_open(s.domain, &av_attr, &s.av, nullptr), "fi_av_open");
    fi_check(fi_endpoint(s.domain, s.info, &s.ep, nullptr), "fi_endpoint");
    fi_check(fi_ep_bind(s.ep, &s.av->fid, 0), "fi_ep_bind (address vector)");
    fi_check(fi_ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind (completion queue)");
    if (s.info->caps & FI_RMA_EVENT) {
      fi_cntr_attr cntr_attr{};
      cntr_attr.events = FI_CNTR_EVENTS_COMP;
      fi_check(fi_cntr_open(s.domain, &cntr_attr, &s.remote_writes, nullptr), "fi_cntr_open");
      fi_check(fi_ep_bind(s.ep, &s.remote_writes->fid, FI_REMOTE_WRITE), "fi_ep_bind (remote write counter)");
    }
    fi_check(fi_enable(s.ep), "fi_enable");
    s.virt_addr = (s.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
    s.max_piece = std::max<size_t>(4096, std::min<size_t>(s.info->ep_attr->max_msg_size, size_t{1} << 30));
    s.tx_limit = std::max<size_t>(1, std::min<size_t>(s.info->tx_attr->size, 256));
    s.recv_pool.assign(kRecvBuffers * (kMaxMessage + 1), 0);
    s.send_pool.assign(kSendBuffers * (kMaxMessage + 1), 0);
    fi_check(fi_mr_reg(s.domain, s.recv_pool.data(), s.recv_pool.size(), FI_RECV, 0, s.next_key++, 0, &s.recv_mr,
                       nullptr),
             "fi_mr_reg (receive buffers)");
    fi_check(fi_mr_reg(s.domain, s.send_pool.data(), s.send_pool.size(), FI_SEND, 0, s.next_key++, 0, &s.send_mr,
                       nullptr),
             "fi_mr_reg (send buffers)");
    for (size_t i = 0; i < kSendBuffers; ++i) s.free_send.push_back(i);
    std::lock_guard<std::mutex> lock(s.mu);
    for (size_t i = 0; i < kRecvBuffers; ++i) {
      State::Op* op = s.new_op(State::Op::kRecv);
      op->buffer = i;
      s.post_recv(op);
    }
    s.throw_if_failed();
  } catch (...) {
    s_.reset();  // State's destructor closes what was opened
    throw;
  }
  s.worker = std::thread([&s] { s.run(); });
}

FabricEngine::~FabricEngine() = default;

std::string FabricEngine::provider_name() const { return s_->info->fabric_attr->prov_name; }

std::vector<uint8_t> FabricEngine::address() const {
  std::vector<uint8_t> name(256);
  size_t len = name.size();
  int rc = fi_getname(&s_->ep->fid, name.data(), &len);
  if (rc == -FI_ETOOSMALL) {
    name.resize(len);
    rc = fi_getname(&s_->ep->fid, name.data(), &len);
  }
  fi_check(rc, "fi_getname");
  name.resize(len);
  return name;
}

int FabricEngine::add_peer(const std::vector<uint8_t>& address, std::chrono::milliseconds timeout) {
  State& s = *s_;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  const int n = fi_av_insert(s.av, address.data(), 1, &addr, 0, nullptr);
  VITDDP_CHECK(n == 1, "transfer engine: the peer's address was not accepted (fi_av_insert: ",
               n < 0 ? fi_strerror(-n) : "0 inserted", ")");
  int peer;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.peers.push_back(addr);
    peer = static_cast<int>(s.peers.size() - 1);
  }
  // Warm the connection: the first message makes the provider connect; wait for its completion.
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.queue_message(lock, peer, kWarmUp, nullptr, 0);
    const bool warmed = s.cv.wait_for(lock, timeout, [&] { return s.warmed.count(peer) || !s.failure.empty(); });
    s.throw_if_failed();
    s.throw_if_peer_failed(peer);
    VITDDP_CHECK(warmed, "transfer engine: peer ", peer, " did not answer within ", timeout.count(),
                 " ms (its engine is not running, or unreachable from here)");
  }
  return peer;
}

int FabricEngine::register_region(void* base, size_t bytes, bool remote_write) {
  State& s = *s_;
  VITDDP_CHECK(base && bytes > 0, "transfer engine: a region needs memory and a size > 0");
  std::lock_guard<std::mutex> lock(s.mu);
  fid_mr* mr = nullptr;
  const uint64_t access = FI_WRITE | FI_SEND | (remote_write ? FI_REMOTE_WRITE : 0);
  fi_check(fi_mr_reg(s.domain, base, bytes, access, 0, s.next_key++, 0, &mr, nullptr), "fi_mr_reg");
  s.regions.push_back({static_cast<char*>(base), bytes, mr, remote_write});
  return static_cast<int>(s.regions.size() - 1);
}

bool FabricEngine::release_region(int region, std::chrono::milliseconds timeout) {
  State& s = *s_;
  std::unique_lock<std::mutex> lock(s.mu);
  VITDDP_CHECK(region >= 0 && static_cast<size_t>(region) < s.regions.size() &&
                   s.regions[static_cast<size_t>(region)].mr,
               "transfer engine: no region ", region, " to release");
  State::Region& r = s.regions[static_cast<size_t>(region)];
  if (!s.cv.wait_for(lock, timeout, [&] { return r.live == 0; })) return false;
  fi_check(fi_close(&r.mr->fid), "fi_close (memory region)");
  r.mr = nullptr;
  return true;
}

RegionDescriptor FabricEngine::descriptor(int region) const {
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  VITDDP_CHECK(region >= 0 && static_cast<size_t>(region) < s.regions.size(), "transfer engine: no region ", region);
  const State::Region& r = s.regions[static_cast<size_t>(region)];
  VITDDP_CHECK(r.remote, "transfer engine: region ", region, " was not registered for remote writes");
  return {fi_mr_key(r.mr), s.virt_addr ? reinterpret_cast<uint64_t>(r.base) : 0, r.bytes};
}

uint64_t FabricEngine::submit(std::vector<Write> writes) {
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.throw_if_failed();
  for (size_t i = 0; i < writes.size(); ++i) {
    const Write& w = writes[i];
    VITDDP_CHECK(w.src_region >= 0 && static_cast<size_t>(w.src_region) < s.regions.size() &&
                     s.regions[static_cast<size_t>(w.src_region)].mr,
                 "transfer engine: write ", i, " names region ", w.src_region, ", which is not registered");
    const State::Region& r = s.regions[static_cast<size_t>(w.src_region)];
    VITDDP_CHECK(w.bytes <= r.bytes && w.src_offset <= r.bytes - w.bytes, "transfer engine: write ", i, " reads ",
                 w.bytes, " bytes at ", w.src_offset, " of region ", w.src_region, " (", r.bytes, " bytes)");
    VITDDP_CHECK(w.bytes <= w.dst.bytes && w.dst_offset <= w.dst.bytes - w.bytes, "transfer engine: write ", i,
                 " writes ", w.bytes, " bytes at ", w.dst_offset, " of a peer's region of ", w.dst.bytes, " bytes");
    VITDDP_CHECK(w.peer >= 0 && static_cast<size_t>(w.peer) < s.peers.size(), "transfer engine: write ", i,
                 " names peer ", w.peer, ", which was not added");
    s.throw_if_peer_failed(w.peer);
  }
  const uint64_t ticket = s.next_list++;
  State::List& list = s.lists[ticket];
  for (const Write& w : writes) {
    State::Region& r = s.regions[static_cast<size_t>(w.src_region)];
    list.peer = w.peer;
    for (uint64_t done = 0; done < w.bytes || (w.bytes == 0 && done == 0); done += s.max_piece) {
      const uint64_t piece = std::min<uint64_t>(s.max_piece, w.bytes - done);
      State::Op* op = s.new_op(State::Op::kWrite);
      op->list = ticket;
      op->peer = w.peer;
      op->local = r.base + w.src_offset + done;
      op->region = w.src_region;
      ++r.live;
      op->bytes = piece;
      op->desc = fi_mr_desc(r.mr);
      op->remote_addr = w.dst.base + w.dst_offset + done;
      op->key = w.dst.key;
      s.queue.push_back(op);
      ++list.total;
      if (w.bytes == 0) break;
    }
  }
  return ticket;
}

void FabricEngine::wait(uint64_t ticket, std::chrono::milliseconds timeout) {
  State& s = *s_;
  std::unique_lock<std::mutex> lock(s.mu);
  auto it = s.lists.find(ticket);
  VITDDP_CHECK(it != s.lists.end(), "transfer engine: no list ", ticket, " is pending");
  State::List& list = it->second;
  const bool finished = s.cv.wait_for(lock, timeout, [&] { return list.done == list.total || !list.error.empty(); });
  const State::List copy = list;
  if (finished && copy.error.empty()) {
    s.lists.erase(it);
    return;
  }
  s.drop_queued(ticket);  // failed or late: what is not posted yet never will be
  if (!copy.error.empty()) {
    // The list's posted writes still complete (or fail) into it.
    throw Error("transfer engine: a write to peer " + std::to_string(copy.peer) + " failed: " + copy.error);
  }
  throw Error("transfer engine: " + std::to_string(copy.total - copy.done) + " of " + std::to_string(copy.total) +
              " writes to peer " + std::to_string(copy.peer) + " not complete after " +
              std::to_string(timeout.count()) + " ms");
}

void FabricEngine::write_contiguous_loop(int src_region, int peer, const RegionDescriptor& dst, uint64_t bytes,
                                         std::chrono::milliseconds timeout) {
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);  // the worker neither posts nor polls meanwhile
  s.throw_if_failed();
  VITDDP_CHECK(src_region >= 0 && static_cast<size_t>(src_region) < s.regions.size(), "transfer engine: no region ",
               src_region);
  State::Region& r = s.regions[static_cast<size_t>(src_region)];
  VITDDP_CHECK(r.mr, "transfer engine: region ", src_region, " was released");
  VITDDP_CHECK(bytes <= r.bytes && bytes <= dst.bytes, "transfer engine: a loop of ", bytes,
               " bytes from a region of ", r.bytes, " into one of ", dst.bytes);
  VITDDP_CHECK(peer >= 0 && static_cast<size_t>(peer) < s.peers.size(), "transfer engine: no peer ", peer);
  s.throw_if_peer_failed(peer);
  const uint64_t ticket = s.next_list++;
  State::List& list = s.lists[ticket];
  list.peer = peer;
  list.total = static_cast<size_t>((bytes + s.max_piece - 1) / s.max_piece);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  uint64_t posted = 0;
  while (list.done < list.total && list.error.empty()) {
    while (posted < bytes && s.in_flight < s.tx_limit) {
      State::Op* op = s.new_op(State::Op::kWrite);
      op->list = ticket;
      op->peer = peer;
      op->local = r.base + posted;
      op->bytes = std::min<uint64_t>(s.max_piece, bytes - posted);
      op->desc = fi_mr_desc(r.mr);
      op->remote_addr = dst.base + posted;
      op->key = dst.key;
      const ssize_t rc = s.post(op);
      if (rc == -FI_EAGAIN) {
        s.ops.erase(op->self);
        break;
      }
      ++s.in_flight;
      op->region = src_region;
      ++r.live;
      if (rc != 0) s.complete(op, 0, fi_strerror(static_cast<int>(-rc)));
      posted += op->bytes;
    }
    fi_cq_msg_entry e[16];
    const ssize_t n = fi_cq_read(s.cq, e, 16);
    for (ssize_t i = 0; i < n; ++i) s.complete(static_cast<State::Op*>(e[i].op_context), e[i].len, "");
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(s.cq, &err, 0) == 1 && err.op_context)
        s.complete(static_cast<State::Op*>(err.op_context), 0, s.error_text(err));
    }
    VITDDP_CHECK(std::chrono::steady_clock::now() < deadline, "transfer engine: ", list.total - list.done, " of ",
                 list.total, " writes to peer ", peer, " not complete after ", timeout.count(), " ms");
  }
  const std::string error = list.error;
  s.lists.erase(ticket);
  s.cv.notify_all();  // receives that completed here
  VITDDP_CHECK(error.empty(), "transfer engine: a write to peer ", peer, " failed: ", error);
}

void FabricEngine::send(int peer, const void* data, size_t bytes) {
  State& s = *s_;
  VITDDP_CHECK(bytes <= kMaxMessage, "transfer engine: a message holds at most ", kMaxMessage, " bytes, got ", bytes);
  std::unique_lock<std::mutex> lock(s.mu);
  VITDDP_CHECK(peer >= 0 && static_cast<size_t>(peer) < s.peers.size(), "transfer engine: no peer ", peer);
  s.queue_message(lock, peer, kUserMessage, data, bytes);
}

std::optional<std::vector<uint8_t>> FabricEngine::poll_message(std::chrono::milliseconds timeout) {
  State& s = *s_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait_for(lock, timeout, [&] { return !s.inbox.empty() || !s.failure.empty(); });
  if (s.inbox.empty()) {
    s.throw_if_failed();
    return std::nullopt;
  }
  std::vector<uint8_t> m = std::move(s.inbox.front());
  s.inbox.pop_front();
  return m;
}

std::vector<uint8_t> FabricEngine::recv(std::chrono::milliseconds timeout) {
  std::optional<std::vector<uint8_t>> m = poll_message(timeout);
  VITDDP_CHECK(m, "transfer engine: no message within ", timeout.count(), " ms");
  return std::move(*m);
}

}  // namespace vitddp::transfer
