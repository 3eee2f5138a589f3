#include "distributed/straggler/bypass_ring.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "framework/core/error.h"

namespace vitddp::straggler {

// Note [The bypass protocol]
// Chunk c's reduce-scatter chain is ranks c, c + 1, ..., c - 1 (mod n); the last one owns it.
// What travels is a *piece*: a partial sum of chunk c with the set of ranks it holds (a bit
// mask). A rank r waiting for chunk c needs the pieces that together hold P = {c, ..., r - 1},
// the chain before it. Messages, each kind on its own channel (tag c):
//   header   r-1 -> r, exactly one per chunk: the piece's mask, or "redirected" with the mask of
//            a piece that went past r to r + 1 instead;
//   payload  r-1 -> r after a plain header (none for an empty chunk);
//   late     a piece that missed its rank's send: forwarded by r-1, or redirected by r-2, so r
//            receives it from either of the two (header, then payload from the same rank);
//   control  r -> r-1, exactly one per chunk: "skip" when r stopped waiting before r-1's header
//            came, else "ok".
// At step s rank r first sends chunk r - s: its own values plus every piece merged so far (a
// "skip" from r + 1 already received turns it into a redirect: the header says so to r + 1 and
// the piece goes to r + 2 as a late piece). Then it waits for chunk r - s - 1 until P is
// covered or, when bypassing, `wait_seconds` have passed (and then still for the values of a
// piece whose header has come); it then says "ok" or "skip" to r-1.
// The owner (the last step) waits for everything. A piece that arrives for a chunk already
// sent is forwarded to r + 1 unreduced. A rank knows late pieces are coming when a header's
// mask leaves part of P uncovered, and receives them until P is covered, so every posted
// receive completes: after its last step a rank only drains what it has posted. Redirects go
// at most two ranks on (r + 1 asked r to skip it, and r + 1 is never the owner then, since the
// owner never skips), so late pieces come from r-1 or r-2. Each rank's contribution to each
// chunk is in exactly one piece that reaches the owner, whatever was late: the sums are exact,
// only the order of additions differs from the plain ring's.

namespace {

using Op = RingTransport::Op;

class RankSet {
 public:
  explicit RankSet(int n = 0) : words_(static_cast<size_t>((n + 63) / 64), 0) {}
  void add(int r) { words_[static_cast<size_t>(r / 64)] |= uint64_t{1} << (r % 64); }
  // Ranks lo..hi (lo <= hi), a word at a time: rings of a thousand ranks build n prefixes each.
  void add_range(int lo, int hi) {
    for (int w = lo / 64; w <= hi / 64; ++w) {
      const int a = std::max(lo, w * 64) - w * 64, b = std::min(hi, w * 64 + 63) - w * 64;
      const uint64_t upto_b = b == 63 ? ~uint64_t{0} : (uint64_t{1} << (b + 1)) - 1;
      words_[static_cast<size_t>(w)] |= upto_b & ~((uint64_t{1} << a) - 1);
    }
  }
  void merge(const RankSet& o) {
    for (size_t i = 0; i < words_.size(); ++i) words_[i] |= o.words_[i];
  }
  void remove(const RankSet& o) {
    for (size_t i = 0; i < words_.size(); ++i) words_[i] &= ~o.words_[i];
  }
  bool operator==(const RankSet& o) const { return words_ == o.words_; }
  bool empty() const {
    return std::all_of(words_.begin(), words_.end(), [](uint64_t w) { return w == 0; });
  }
  RankSet with(const RankSet& o) const {
    RankSet u = *this;
    u.merge(o);
    return u;
  }
  std::vector<uint64_t>& words() { return words_; }
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  std::vector<uint64_t> words_;
};

constexpr uint64_t kRedirected = 1;
constexpr uint8_t kOk = 0, kSkip = 1;

class Ring {
 public:
  Ring(RingTransport& t, float* data, size_t count, const BypassOptions& options)
      : t_(t), n_(t.size()), r_(t.rank()), data_(data), count_(count), options_(options) {
    chunks_.resize(static_cast<size_t>(n_));
    for (int c = 0; c < n_; ++c) {
      ChunkState& s = chunks_[static_cast<size_t>(c)];
      s.covered = s.inflight = s.deferred = RankSet(n_);
      s.merged = RankSet(n_);
      s.merged.add(r_);
      s.prefix = RankSet(n_);
      // c, c + 1, ..., r - 1 around the ring (empty when c == r).
      if (c < r_) {
        s.prefix.add_range(c, r_ - 1);
      } else if (c > r_) {
        s.prefix.add_range(c, n_ - 1);
        if (r_ > 0) s.prefix.add_range(0, r_ - 1);
      }
    }
  }

  RingStats run() {
    if (n_ == 1) {
      stats_.reduce_scatter_done = stats_.all_gather_done = t_.now();
      return stats_;
    }
    reduce_scatter();
    all_gather();
    return stats_;
  }

 private:
  // A piece of a chunk that is not the awaited one yet: added in when that chunk's step comes,
  // so that a reduce of a later chunk never delays the awaited one or a send.
  struct Deferred {
    RankSet mask;
    const std::vector<float>* values;
  };
  struct ChunkState {
    RankSet prefix;    // P: the ranks before this one in the chunk's chain
    RankSet covered;   // of P: in pieces merged here, forwarded from here, or redirected past here
    RankSet inflight;  // of P: in pieces whose header came and whose payload has not
    RankSet deferred;  // of P: in the pieces of `early`
    std::vector<Deferred> early;  // pieces that came before the chunk's step
    RankSet merged;    // in this rank's values of the chunk (its own rank included)
    bool header_seen = false, sent = false, late_posted = false, skip_requested = false;
    bool complete() const { return covered == prefix; }
  };
  struct Pending {
    std::unique_ptr<Op> op;
    std::function<void(int source)> done;  // may post more
    bool control = false;                  // a receive of a control
  };
  int mod(int x) const { return ((x % n_) + n_) % n_; }
  size_t begin(int c) const {
    const size_t base = count_ / static_cast<size_t>(n_), extra = count_ % static_cast<size_t>(n_);
    const size_t i = static_cast<size_t>(c);
    return i * base + std::min(i, extra);
  }
  size_t length(int c) const { return begin(c + 1) - begin(c); }
  float* chunk(int c) { return data_ + begin(c); }
  size_t header_bytes() const { return sizeof(uint64_t) * (1 + chunks_[0].merged.words().size()); }
  ChunkState& state(int c) { return chunks_[static_cast<size_t>(c)]; }

  void post(std::unique_ptr<Op> op, std::function<void(int)> done = nullptr, bool control = false) {
    pending_.push_back({std::move(op), std::move(done), control});
  }

  // Runs the handlers of completed operations (of control receives only, with
  // `controls_only`) until `until()` holds (true) or `deadline` passes (false).
  bool progress(const std::function<bool()>& until, double deadline, bool controls_only = false) {
    while (!until()) {
      std::vector<Op*> ops;
      ops.reserve(pending_.size());
      for (Pending& p : pending_) ops.push_back(!controls_only || p.control ? p.op.get() : nullptr);
      if (controls_only && std::all_of(ops.begin(), ops.end(), [](Op* o) { return o == nullptr; })) return until();
      VITDDP_ASSERT(!ops.empty(), "bypass ring: rank ", r_, " waits with nothing posted");
      const int i = t_.wait_any(ops, deadline);
      if (i < 0) return until();
      Pending done = std::move(pending_[static_cast<size_t>(i)]);
      pending_.erase(pending_.begin() + i);
      if (done.done) done.done(done.op->source());
    }
    return true;
  }
  // The controls that have come, before a send (nothing else: no reduce delays the send).
  void poll_controls() {
    progress([] { return false; }, t_.now(), /*controls_only=*/true);
  }

  std::vector<uint64_t>& header_buffer(uint64_t flags, const RankSet& mask) {
    std::vector<uint64_t>& h = headers_.emplace_back(1 + mask.words().size());
    h[0] = flags;
    std::copy(mask.words().begin(), mask.words().end(), h.begin() + 1);
    return h;
  }
  RankSet mask_of(const std::vector<uint64_t>& h) const {
    RankSet m(n_);
    std::copy(h.begin() + 1, h.end(), m.words().begin());
    return m;
  }

  // A piece of chunk c: header, then its values (none for an empty chunk), to `to`.
  void send_piece(int to, Channel header, Channel payload, int c, uint64_t flags, const RankSet& mask,
                  const float* values) {
    std::vector<uint64_t>& h = header_buffer(flags, mask);
    sends_.push_back(t_.post_send(to, header, static_cast<uint64_t>(c), h.data(), header_bytes()));
    if (!(flags & kRedirected) && length(c) > 0)
      sends_.push_back(t_.post_send(to, payload, static_cast<uint64_t>(c), values, length(c) * sizeof(float)));
  }

  void send_control(int c, uint8_t what) {
    uint8_t& v = controls_.emplace_back(what);
    sends_.push_back(t_.post_send(mod(r_ - 1), Channel::kControl, static_cast<uint64_t>(c), &v, 1));
  }

  // Step s's send: chunk c with every piece merged so far, to r + 1, or past it when it asked.
  void send_chunk(int c) {
    poll_controls();  // a "skip" from r + 1 may have come
    ChunkState& s = state(c);
    if (options_.bypass && s.skip_requested && n_ >= 3) {
      send_piece(mod(r_ + 1), Channel::kHeader, Channel::kPayload, c, kRedirected, s.merged, nullptr);
      send_piece(mod(r_ + 2), Channel::kLateHeader, Channel::kLatePayload, c, 0, s.merged, chunk(c));
      ++stats_.redirects;
    } else {
      send_piece(mod(r_ + 1), Channel::kHeader, Channel::kPayload, c, 0, s.merged, chunk(c));
    }
    s.sent = true;
  }

  void merge(int c, const RankSet& mask, const std::vector<float>& values) {
    t_.before_reduce(values.size());
    float* dst = chunk(c);
    for (size_t i = 0; i < values.size(); ++i) dst[i] += values[i];
    state(c).merged.merge(mask);
  }

  // A piece of chunk c arrived: added in if the chunk is the awaited one, kept for its step if
  // it is a later one, passed on if the chunk has gone.
  void on_piece(int c, const RankSet& mask, const std::vector<float>& values) {
    ChunkState& s = state(c);
    s.inflight.remove(mask);
    if (!s.sent && c != awaited_) {
      s.early.push_back({mask, &values});
      s.deferred.merge(mask);
      expect_late(c);
      return;
    }
    if (!s.sent) {
      merge(c, mask, values);
    } else {
      send_piece(mod(r_ + 1), Channel::kLateHeader, Channel::kLatePayload, c, 0, mask, values.data());
      ++stats_.forwarded;
    }
    s.covered.merge(mask);
    expect_late(c);
  }

  // Receives a piece's values from `from` after its header, then on_piece.
  void receive_values(int from, Channel payload, int c, const RankSet& mask) {
    std::vector<float>& values = payloads_.emplace_back(length(c));
    if (values.empty()) {
      on_piece(c, mask, values);
      return;
    }
    post(t_.post_recv({from}, payload, static_cast<uint64_t>(c), values.data(), values.size() * sizeof(float)),
         [this, c, mask, &values](int) { on_piece(c, mask, values); });
  }

  void on_header(int c, const std::vector<uint64_t>& h) {
    ChunkState& s = state(c);
    s.header_seen = true;
    const RankSet mask = mask_of(h);
    if (h[0] & kRedirected) {
      s.covered.merge(mask);
      expect_late(c);
      return;
    }
    s.inflight.merge(mask);
    receive_values(mod(r_ - 1), Channel::kPayload, c, mask);
  }

  // Once the header has told what r-1 holds: if P is not covered by what came and is coming,
  // the rest comes as late pieces.
  void expect_late(int c) {
    ChunkState& s = state(c);
    if (!s.header_seen || s.late_posted || s.covered.with(s.inflight).with(s.deferred) == s.prefix) return;
    s.late_posted = true;
    std::vector<int> from = {mod(r_ - 1)};
    if (n_ >= 3) from.push_back(mod(r_ - 2));
    std::vector<uint64_t>& h = headers_.emplace_back(1 + s.prefix.words().size());
    post(t_.post_recv(from, Channel::kLateHeader, static_cast<uint64_t>(c), h.data(), header_bytes()),
         [this, c, &h](int source) {
           ChunkState& st = state(c);
           st.late_posted = false;
           const RankSet mask = mask_of(h);
           st.inflight.merge(mask);
           receive_values(source, Channel::kLatePayload, c, mask);
         });
  }

  // Step s's header from r-1 and control from r + 1, posted as the step begins (a message that
  // comes earlier waits in the transport): few posted operations at any time, however large
  // the ring.
  void post_step_receives(int s) {
    const int c_in = mod(r_ - s - 1), c_out = mod(r_ - s);
    std::vector<uint64_t>& h = headers_.emplace_back(1 + state(c_in).prefix.words().size());
    post(t_.post_recv({mod(r_ - 1)}, Channel::kHeader, static_cast<uint64_t>(c_in), h.data(), header_bytes()),
         [this, c_in, &h](int) { on_header(c_in, h); });
    uint8_t& v = controls_.emplace_back(kOk);
    post(t_.post_recv({mod(r_ + 1)}, Channel::kControl, static_cast<uint64_t>(c_out), &v, 1),
         [this, c_out, &v](int) {
           if (v == kSkip) state(c_out).skip_requested = true;
         },
         /*control=*/true);
  }

  // Waits for every send posted so far (their buffers are then free).
  void finish_sends() {
    for (std::unique_ptr<Op>& op : sends_) {
      std::vector<Op*> one{op.get()};
      t_.wait_any(one, std::numeric_limits<double>::infinity());
    }
    sends_.clear();
  }

  void reduce_scatter() {
    const double forever = std::numeric_limits<double>::infinity();
    for (int s = 0; s < n_ - 1; ++s) {
      post_step_receives(s);
      send_chunk(mod(r_ - s));
      const int c = mod(r_ - s - 1);
      awaited_ = c;
      for (const Deferred& d : state(c).early) {
        merge(c, d.mask, *d.values);
        state(c).covered.merge(d.mask);
      }
      state(c).deferred = RankSet(n_);
      state(c).early.clear();
      const bool owner = s == n_ - 2;
      const double deadline = options_.bypass && !owner && n_ >= 3 ? t_.now() + options_.wait_seconds : forever;
      bool complete = progress([&] { return state(c).complete(); }, deadline);
      // A piece whose header has come is arriving: waiting for its values costs their transfer
      // only, where moving on would cost a forward and a reduce further on.
      if (!complete && !state(c).inflight.empty())
        complete = progress([&] { return state(c).complete() || state(c).inflight.empty(); }, forever) &&
                   state(c).complete();
      const bool skipped = !complete && !state(c).header_seen;
      if (skipped) ++stats_.skips;
      send_control(c, skipped ? kSkip : kOk);
    }
    awaited_ = -1;
    stats_.reduce_scatter_done = t_.now();
    // What is left: late pieces to pass on, controls to take, sends to finish.
    progress([&] { return pending_.empty(); }, forever);
    finish_sends();
  }

  void all_gather() {
    const double forever = std::numeric_limits<double>::infinity();
    for (int s = 0; s < n_ - 1; ++s) {
      const int c_send = mod(r_ + 1 - s), c_recv = mod(r_ - s);
      if (length(c_send) > 0)
        sends_.push_back(t_.post_send(mod(r_ + 1), Channel::kGather, static_cast<uint64_t>(c_send), chunk(c_send),
                          length(c_send) * sizeof(float)));
      bool received = length(c_recv) == 0;
      if (!received)
        post(t_.post_recv({mod(r_ - 1)}, Channel::kGather, static_cast<uint64_t>(c_recv), chunk(c_recv),
                          length(c_recv) * sizeof(float)),
             [&received](int) { received = true; });
      progress([&] { return received; }, forever);
    }
    finish_sends();
    stats_.all_gather_done = t_.now();
  }

  RingTransport& t_;
  const int n_, r_;
  float* data_;
  const size_t count_;
  const BypassOptions options_;
  std::vector<ChunkState> chunks_;
  int awaited_ = -1;  // the chunk of the step under way
  std::vector<Pending> pending_;              // receives
  std::vector<std::unique_ptr<Op>> sends_;  // waited on only when their buffers are needed again
  // Buffers of posted operations; a deque keeps each one where it is while more are added.
  std::deque<std::vector<uint64_t>> headers_;
  std::deque<std::vector<float>> payloads_;
  std::deque<uint8_t> controls_;
  RingStats stats_;
};

}  // namespace

RingStats ring_allreduce(RingTransport& transport, float* data, size_t count, const BypassOptions& options) {
  VITDDP_CHECK(transport.size() >= 1 && transport.rank() >= 0 && transport.rank() < transport.size(),
               "ring_allreduce: rank ", transport.rank(), " of ", transport.size());
  VITDDP_CHECK(options.wait_seconds >= 0, "ring_allreduce: wait_seconds must be >= 0, got ", options.wait_seconds);
  Ring ring(transport, data, count, options);
  return ring.run();
}

}  // namespace vitddp::straggler
