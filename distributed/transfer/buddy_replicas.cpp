#include "distributed/transfer/buddy_replicas.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "distributed/file_store.h"
#include "distributed/transfer/fabric_engine.h"
#include "framework/core/error.h"
#include "framework/io/atomic_file.h"

namespace vitddp::transfer {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::string address_key(int node) { return "replica.address." + std::to_string(node); }

// A step folder's or a rank file's name as the memory checkpoints write them (train/checkpoint/
// checkpoint.h); a message naming anything else is refused, so no path leaves the folder.
bool is_step_name(const std::string& n) {
  return n.size() > 5 && n.rfind("step-", 0) == 0 &&
         std::all_of(n.begin() + 5, n.end(), [](char c) { return c >= '0' && c <= '9'; });
}
bool is_rank_file(const std::string& n) {
  for (const char* ext : {".safetensors", ".json"}) {
    const std::string e = ext;
    if (n.size() > 5 + e.size() && n.rfind("rank-", 0) == 0 && n.compare(n.size() - e.size(), e.size(), e) == 0 &&
        std::all_of(n.begin() + 5, n.end() - static_cast<std::ptrdiff_t>(e.size()),
                    [](char c) { return c >= '0' && c <= '9'; }))
      return true;
  }
  return false;
}

// A file of the memory checkpoints mapped read-only: it stays readable while a rank's retention
// unlinks it, so a push in flight never reads a half-deleted step.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    VITDDP_CHECK(fd >= 0, path, ": ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
      ::close(fd);
      throw Error(path + ": cannot read its size, or it is empty");
    }
    bytes_ = static_cast<size_t>(st.st_size);
    data_ = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    VITDDP_CHECK(data_ != MAP_FAILED, path, ": mmap: ", std::strerror(errno));
  }
  ~MappedFile() {
    if (data_ != MAP_FAILED) ::munmap(data_, bytes_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = MAP_FAILED;
  size_t bytes_ = 0;
};

// Anonymous memory for a replica: the launcher's own pages, gone with it.
class Buffer {
 public:
  explicit Buffer(size_t bytes) : bytes_(bytes) {
    data_ = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    VITDDP_CHECK(data_ != MAP_FAILED, "buddy replicas: cannot map ", bytes_, " bytes for a replica: ",
                 std::strerror(errno));
  }
  ~Buffer() {
    if (data_ != MAP_FAILED) ::munmap(data_, bytes_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* data() const { return static_cast<char*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = MAP_FAILED;
  size_t bytes_ = 0;
};

// The newest step of a memory checkpoint folder whole for every rank its RANKS file lists: a
// rank writes its record after its tensors file (Note [Checkpoint write order]), so the records'
// presence says the step is whole. Its files, tensors before records.
struct WholeStep {
  int64_t step = 0;
  std::string dir;                 // "step-000120"
  std::vector<std::string> files;  // names inside it
};

std::optional<WholeStep> newest_whole_step(const std::string& folder) {
  std::ifstream ranks_file(folder + "/RANKS");
  std::vector<int> ranks;
  for (int r; ranks_file >> r;) ranks.push_back(r);
  if (ranks.empty()) return std::nullopt;
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_step_name(name)) steps.emplace_back(std::stoll(name.substr(5)), name);
  }
  std::sort(steps.rbegin(), steps.rend());
  for (const auto& [step, dir] : steps) {
    WholeStep w{step, dir, {}};
    bool whole = true;
    for (int r : ranks) {
      const std::string base = folder + "/" + dir + "/rank-" + std::to_string(r);
      whole = whole && ::access((base + ".json").c_str(), R_OK) == 0;
      w.files.push_back("rank-" + std::to_string(r) + ".safetensors");
    }
    for (int r : ranks) w.files.push_back("rank-" + std::to_string(r) + ".json");
    if (whole) return w;
  }
  return std::nullopt;
}

}  // namespace

// Note [Double-buffered replicas]
// The buddy keeps two regions per node it holds. An offer of step S goes into the region that
// does not hold the newest whole replica; only the sender's "done", sent once every write of
// the list has completed in the buddy's memory (FI_DELIVERY_COMPLETE), makes it the newest. A
// sender that dies mid-push, or a list that fails, leaves the other region whole: no replica is
// lost. A replacement is handed the newest whole one.
struct BuddyReplicas::State {
  struct Slot {
    std::unique_ptr<Buffer> buffer;
    int region = -1;
    int64_t step = 0;
    std::string dir;
    json files;  // [{"name", "bytes", "offset"}]
    uint64_t total = 0;  // the files' bytes, back to back
    bool whole = false;
  };
  struct Ward {  // the replicas of one node
    Slot slots[2];
    int newest = -1;
  };
  // One list of writes this launcher is sending: a push of its own step, or a return of a ward's.
  struct Outgoing {
    int peer = -1;
    int node = 0;  // whose state
    int64_t step = 0;
    std::vector<std::unique_ptr<MappedFile>> mapped;
    std::vector<int> own_regions;  // registered for this list, released after it
    struct Piece {
      int region;
      uint64_t offset, bytes, dst_offset;
    };
    std::vector<Piece> pieces;
    std::chrono::steady_clock::time_point deadline;
  };

  BuddyReplicaOptions options;
  FileStore& store;
  std::ostream& log;
  std::unique_ptr<FabricEngine> engine;
  std::string my_address;
  std::map<std::string, int> peers;  // by address
  std::map<int, Ward> wards;
  std::map<std::string, Outgoing> outgoing;  // "push", "return"
  std::deque<json> backlog;                  // messages fetch_own_replica left for the service
  std::vector<std::unique_ptr<MappedFile>> unreleased;  // regions still in flight when dropped
  int64_t pushed_step = 0;
  std::chrono::steady_clock::time_point next_scan{}, next_push_try{};
  bool said_held = false, said_pushed = false;
  std::atomic<bool> stop{false};
  std::thread thread;

  State(const BuddyReplicaOptions& o, FileStore& st, std::ostream& l) : options(o), store(st), log(l) {}

  int buddy() const { return (options.node + 1) % options.nnodes; }

  void say(const std::string& line) {
    log << "launcher: node " + std::to_string(options.node) + ": " + line + "\n";
    log.flush();
  }

  int peer_at(const std::string& address) {
    if (auto it = peers.find(address); it != peers.end()) return it->second;
    const int peer =
        engine->add_peer(address_from_text(address), std::min<std::chrono::milliseconds>(options.timeout, 10s));
    peers[address] = peer;
    return peer;
  }

  void send(int peer, json m) {
    m["from"] = my_address;
    m["from_node"] = options.node;
    const std::string text = m.dump();
    engine->send(peer, text.data(), text.size());
  }

  // Sends the list (after the receiver's "ready" named its region), waits for it, then "done".
  void complete_outgoing(const std::string& purpose, const json& ready) {
    auto it = outgoing.find(purpose);
    if (it == outgoing.end() || it->second.step != ready.at("step").get<int64_t>()) return;  // abandoned
    Outgoing& o = it->second;
    const RegionDescriptor dst = descriptor_from_json(ready.at("region"));
    std::vector<Write> writes;
    for (const auto& p : o.pieces) writes.push_back({p.region, p.offset, p.bytes, o.peer, dst, p.dst_offset});
    const auto t0 = std::chrono::steady_clock::now();
    // A failure here goes to run(), which starts over on a new endpoint: closing this one ends
    // the list's writes before their files are unmapped.
    engine->wait(engine->submit(writes), options.timeout);
    send(o.peer, {{"type", "done"}, {"purpose", purpose}, {"node", o.node}, {"step", o.step}});
    if (purpose == "push") {
      pushed_step = o.step;
      if (!said_pushed) {
        uint64_t bytes = 0;
        for (const auto& p : o.pieces) bytes += p.bytes;
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        say("memory checkpoints replicated to node " + std::to_string(buddy()) + " (step " + std::to_string(o.step) +
            ", " + std::to_string(bytes) + " bytes in " + std::to_string(o.pieces.size()) + " writes, " +
            std::to_string(s) + " s; said once)");
        said_pushed = true;
      }
    }
    finish_outgoing(purpose);
  }

  // Unregisters a list's own regions; where writes still read them, their files stay mapped.
  void release(Outgoing& o) {
    bool released = true;
    for (int r : o.own_regions) released = engine->release_region(r, 5s) && released;
    if (!released)
      for (auto& m : o.mapped) unreleased.push_back(std::move(m));
  }

  void finish_outgoing(const std::string& purpose) {
    auto it = outgoing.find(purpose);
    if (it == outgoing.end()) return;
    release(it->second);
    outgoing.erase(it);
  }

  // An offer of a node's step: its files' names and sizes. Answered with the region to write into.
  void receive_offer(const json& m) {
    const int node = m.at("node").get<int>();
    const uint64_t total = m.at("total").get<uint64_t>();
    VITDDP_CHECK(m.at("purpose") == "push", "buddy replicas: an offer to return a replica outside a restart");
    VITDDP_CHECK(node >= 0 && node < options.nnodes && node != options.node, "buddy replicas: an offer of node ",
                 node);
    Ward& ward = wards[node];
    Slot& slot = ward.slots[ward.newest == 0 ? 1 : 0];
    if (!slot.buffer || slot.buffer->bytes() < total) {
      if (slot.region >= 0 && !engine->release_region(slot.region, 5s)) (void)slot.buffer.release();  // still read
      slot.region = -1;
      slot.buffer = std::make_unique<Buffer>(std::max<uint64_t>(total, 1));
      slot.region = engine->register_region(slot.buffer->data(), slot.buffer->bytes(), /*remote_write=*/true);
    }
    slot.whole = false;
    slot.step = m.at("step").get<int64_t>();
    slot.dir = m.at("dir").get<std::string>();
    slot.files = m.at("files");
    slot.total = total;
    const RegionDescriptor d = engine->descriptor(slot.region);
    store.set(receiving_key(node), std::to_string(slot.step));
    send(peer_at(m.at("from")),
         {{"type", "ready"}, {"purpose", "push"}, {"step", slot.step}, {"region", descriptor_json(d)}});
  }

  void receive_done(const json& m) {
    const int node = m.at("node").get<int>();
    auto it = wards.find(node);
    if (it == wards.end()) return;
    Ward& ward = it->second;
    for (int i = 0; i < 2; ++i) {
      Slot& slot = ward.slots[i];
      if (slot.whole || slot.step != m.at("step").get<int64_t>()) continue;
      slot.whole = true;
      ward.newest = i;
      store.set(held_key(node), std::to_string(slot.step));
      if (!said_held) {
        say("holds node " + std::to_string(node) + "'s memory checkpoints as its buddy (step " +
            std::to_string(slot.step) + "; said once)");
        said_held = true;
      }
    }
  }

  // A replacement of `node` asks for its replica.
  void receive_want(const json& m) {
    const int node = m.at("node").get<int>();
    const int peer = peer_at(m.at("from"));
    auto it = wards.find(node);
    if (it == wards.end() || it->second.newest < 0) {
      say("node " + std::to_string(node) + "'s new launcher asked for its replica; this node holds none");
      send(peer, {{"type", "none"}, {"node", node}});
      return;
    }
    const Slot& slot = it->second.slots[it->second.newest];
    // Asked again while handing it back: the first answer stands.
    if (auto busy = outgoing.find("return"); busy != outgoing.end() && busy->second.node == node) return;
    finish_outgoing("return");
    Outgoing& o = outgoing["return"];
    o.peer = peer;
    o.node = node;
    o.step = slot.step;
    o.deadline = std::chrono::steady_clock::now() + options.timeout;
    for (const json& f : slot.files) {
      const uint64_t at = f.at("offset").get<uint64_t>();
      o.pieces.push_back({slot.region, at, f.at("bytes").get<uint64_t>(), at});
    }
    send(peer, {{"type", "offer"}, {"purpose", "return"}, {"node", node}, {"step", slot.step}, {"dir", slot.dir},
                {"files", slot.files}, {"total", slot.total}});
    say("handing node " + std::to_string(node) + "'s replica (step " + std::to_string(slot.step) +
        ") back to its new launcher");
  }

  void handle(const json& m) {
    const std::string type = m.at("type");
    if (type == "offer") receive_offer(m);
    else if (type == "ready") complete_outgoing(m.at("purpose"), m);
    else if (type == "done") receive_done(m);
    else if (type == "want") receive_want(m);
    // "none" and late answers to a fetch that gave up: nothing to do.
  }

  // Offers this node's newest whole step to the buddy when it is newer than the last pushed.
  void maybe_push() {
    const auto now = std::chrono::steady_clock::now();
    for (const char* purpose : {"push", "return"}) {
      auto it = outgoing.find(purpose);
      if (it != outgoing.end() && now > it->second.deadline) {
        say(std::string(purpose == std::string("push") ? "the buddy" : "the new launcher") +
            " did not answer an offer of step " + std::to_string(it->second.step) + " within the timeout; dropped");
        finish_outgoing(purpose);
        next_push_try = now + 2s;
      }
    }
    if (outgoing.count("push") || now < next_scan || now < next_push_try) return;
    next_scan = now + 200ms;
    const std::optional<WholeStep> newest = newest_whole_step(options.memory_folder);
    if (!newest || newest->step <= pushed_step || !store.has(address_key(buddy()))) return;
    const std::string address = store.get(address_key(buddy()), 1s);
    Outgoing o;
    o.node = options.node;
    o.step = newest->step;
    o.deadline = now + options.timeout;
    json files = json::array();
    uint64_t offset = 0;
    try {
      o.peer = peer_at(address);
      for (const std::string& name : newest->files) {
        auto f = std::make_unique<MappedFile>(options.memory_folder + "/" + newest->dir + "/" + name);
        const int region = engine->register_region(f->data(), f->bytes(), /*remote_write=*/false);
        o.own_regions.push_back(region);
        o.pieces.push_back({region, 0, f->bytes(), offset});
        files.push_back({{"name", name}, {"bytes", f->bytes()}, {"offset", offset}});
        offset += f->bytes();
        o.mapped.push_back(std::move(f));
      }
    } catch (const Error&) {  // a step retention removed meanwhile, or a buddy not reachable: later
      release(o);
      next_push_try = now + 2s;
      return;
    }
    const int peer = o.peer;
    outgoing["push"] = std::move(o);
    send(peer, {{"type", "offer"}, {"purpose", "push"}, {"node", options.node}, {"step", newest->step},
                {"dir", newest->dir}, {"files", files}, {"total", offset}});
  }

  // A fresh endpoint after a peer failed: libfabric's tcp provider can leave an endpoint that lost
  // a peer mid-write deaf to new connections, so the service starts over on a new one (the old
  // one closed first, which ends its writes, before the files they read are unmapped), keeps its
  // replicas (their regions registered again) and publishes its new address.
  void open_engine() {
    FabricOptions fabric;
    fabric.provider = "tcp";
    fabric.node = options.host;
    auto fresh = std::make_unique<FabricEngine>(fabric);
    std::swap(engine, fresh);
    fresh.reset();
    outgoing.clear();
    unreleased.clear();
    peers.clear();
    for (auto& [node, ward] : wards)
      for (Slot& slot : ward.slots)
        if (slot.buffer) slot.region = engine->register_region(slot.buffer->data(), slot.buffer->bytes(), true);
    my_address = address_text(engine->address());
    store.set(address_key(options.node), my_address);
  }

  void run() {
    bool said_failure = false;
    while (!stop) {
      try {
        json m;
        if (!backlog.empty()) {
          m = std::move(backlog.front());
          backlog.pop_front();
        } else if (auto bytes = engine->poll_message(100ms)) {
          m = json::parse(bytes->begin(), bytes->end());
        }
        if (!m.is_null()) handle(m);
        maybe_push();
      } catch (const std::exception& e) {
        // A peer gone mid-push, a bad message: said, and the service goes on with the others.
        if (!said_failure) say(std::string("buddy replicas: ") + e.what() + " (further failures not said)");
        said_failure = true;
        next_push_try = std::chrono::steady_clock::now() + 2s;
        std::this_thread::sleep_for(100ms);
        if (dynamic_cast<const Error*>(&e)) {
          try {
            open_engine();
          } catch (const Error& again) {
            say(std::string("buddy replicas: cannot open a new endpoint (") + again.what() + "); stopped");
            return;
          }
        }
      }
    }
  }
};

std::string BuddyReplicas::held_key(int node) { return "replica.held." + std::to_string(node); }
std::string BuddyReplicas::receiving_key(int node) { return "replica.receiving." + std::to_string(node); }

BuddyReplicas::BuddyReplicas(const BuddyReplicaOptions& options, FileStore& store, std::ostream& log)
    : s_(std::make_unique<State>(options, store, log)) {
  VITDDP_CHECK(options.nnodes >= 2 && options.node >= 0 && options.node < options.nnodes,
               "buddy replicas: node ", options.node, " of ", options.nnodes);
  s_->open_engine();
}

BuddyReplicas::~BuddyReplicas() {
  s_->stop = true;
  if (s_->thread.joinable()) s_->thread.join();
}

void BuddyReplicas::start() {
  State& s = *s_;
  s.thread = std::thread([&s] { s.run(); });
}

int64_t BuddyReplicas::fetch_own_replica() {
  State& s = *s_;
  const int buddy = s.buddy();
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + s.options.timeout;
  std::unique_ptr<Buffer> buffer;
  int region = -1;
  json offer;
  try {
    // Asked again every 2 s until the buddy offers, at the address it publishes then: a buddy
    // whose endpoint started over (above) has a new one.
    int peer = -1;
    auto next_ask = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < deadline) {
      if (offer.is_null() && std::chrono::steady_clock::now() >= next_ask) {
        next_ask = std::chrono::steady_clock::now() + 2s;
        try {
          peer = s.peer_at(s.store.get(address_key(buddy), s.options.timeout));
          s.send(peer, {{"type", "want"}, {"node", s.options.node}});
        } catch (const Error&) {  // a stale address: the next ask reads it again
          s.peers.clear();
        }
      }
      std::optional<std::vector<uint8_t>> bytes = s.engine->poll_message(100ms);
      if (!bytes) continue;
      json m = json::parse(bytes->begin(), bytes->end());
      const bool return_message = m.value("purpose", "") == "return" || m.value("type", "") == "none";
      if (!return_message || m.value("from_node", -1) != buddy) {
        s.backlog.push_back(std::move(m));  // the service's, once it starts
        continue;
      }
      if (m.at("type") == "none") {
        s.say("node " + std::to_string(buddy) + " holds no replica of this node's memory checkpoints");
        return 0;
      }
      if (m.at("type") == "offer") {
        if (!offer.is_null()) continue;  // an answer to an earlier ask
        peer = s.peer_at(m.at("from"));
        VITDDP_CHECK(is_step_name(m.at("dir")), "buddy replicas: a replica of step folder '",
                     m.at("dir").get<std::string>(), "'");
        for (const json& f : m.at("files"))
          VITDDP_CHECK(is_rank_file(f.at("name")) && f.at("offset").get<uint64_t>() + f.at("bytes").get<uint64_t>() <=
                                                         m.at("total").get<uint64_t>(),
                       "buddy replicas: a replica's file '", f.at("name").get<std::string>(), "' is not a rank's");
        offer = m;
        buffer = std::make_unique<Buffer>(std::max<uint64_t>(m.at("total").get<uint64_t>(), 1));
        region = s.engine->register_region(buffer->data(), buffer->bytes(), /*remote_write=*/true);
        const RegionDescriptor d = s.engine->descriptor(region);
        s.send(peer,
               {{"type", "ready"}, {"purpose", "return"}, {"step", m.at("step")}, {"region", descriptor_json(d)}});
        continue;
      }
      if (m.at("type") != "done" || offer.is_null() || m.at("step") != offer.at("step")) continue;
      // Every write has landed: the files go where this node's ranks look.
      const std::string dir = s.options.memory_folder + "/" + offer.at("dir").get<std::string>();
      std::filesystem::create_directories(dir);
      for (const json& f : offer.at("files")) {  // in the offer's order: each record after its tensors
        AtomicFileWriter file(dir + "/" + f.at("name").get<std::string>());
        file.write(buffer->data() + f.at("offset").get<uint64_t>(), f.at("bytes").get<uint64_t>());
        file.commit();
      }
      write_file_atomically(s.options.memory_folder + "/" + kFromBuddyFile, offer.at("dir").get<std::string>());
      if (!s.engine->release_region(region, 5s)) (void)buffer.release();
      s.pushed_step = offer.at("step").get<int64_t>();  // the buddy has it
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      s.say("node " + std::to_string(buddy) + " handed back this node's memory checkpoint of step " +
            std::to_string(offer.at("step").get<int64_t>()) + " (" + std::to_string(offer.at("total").get<uint64_t>()) +
            " bytes in " + std::to_string(seconds) + " s)");
      return offer.at("step").get<int64_t>();
    }
    s.say("node " + std::to_string(buddy) + " did not hand back this node's replica within the timeout");
  } catch (const std::exception& e) {
    s.say(std::string("cannot fetch this node's replica from node ") + std::to_string(buddy) + ": " + e.what());
  }
  if (region >= 0 && !s.engine->release_region(region, 1s)) (void)buffer.release();
  return 0;
}

}  // namespace vitddp::transfer
