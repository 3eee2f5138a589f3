#include "distributed/reducer.h"

#include <algorithm>

#include "distributed/bucketing.h"
#include "framework/core/error.h"
#include "framework/core/nvtx.h"

namespace vitddp {

// Note [Reducer flow]
// Parameters are assigned to buckets once, in reverse registration order (Note [Bucket order]
// in bucketing.cpp). Before each backward every parameter is pending. Each gradient-ready hook
// calls mark_ready(i); when the last pending parameter of a bucket arrives, the bucket is ready,
// but it is launched only when every bucket before it in the launch order has been launched
// (next_launch_; index order unless Note [Launch order] says otherwise), so every rank issues
// the same collectives in the same order, which NCCL requires. A launch hands the bucket to the comm hook, which starts an asynchronous
// collective (on NCCL, on the communication stream after an event on the compute stream, so it
// overlaps the rest of backward). finalize() deals with parameters that got no gradient, waits
// for every bucket (on NCCL: the compute stream waits, the host does not) and copies results
// out of buckets that are not views.
Reducer::Reducer(std::vector<ReducerParam> params, Tensor flat_grads, ProcessGroup& group,
                 std::unique_ptr<CommHook> hook, const ReducerOptions& options)
    : params_(std::move(params)), flat_grads_(std::move(flat_grads)), group_(group), hook_(std::move(hook)),
      options_(options) {
  VITDDP_CHECK(!params_.empty(), "Reducer: no parameters");
  VITDDP_CHECK(options.bucket_cap_bytes > 0 && options.first_bucket_cap_bytes > 0, "Reducer: bucket caps must be > 0");
  for (size_t cap : options.early_bucket_cap_bytes) VITDDP_CHECK(cap > 0, "Reducer: bucket caps must be > 0");
  VITDDP_CHECK(options.ready_order_share > 0 && options.ready_order_share <= 1,
               "Reducer: the share of buckets launched in ready order must be in (0, 1], got ", options.ready_order_share);
  for (const ReducerParam& p : params_) {
    VITDDP_CHECK(p.tensor.grad().defined(), "Reducer: parameter ", p.name, " has no gradient buffer");
    bytes_.push_back(p.tensor.nbytes());
    dtypes_.push_back(p.tensor.grad().dtype());
  }
  build_buckets(compute_bucket_assignment(bytes_, dtypes_, caps()));
  ready_.assign(params_.size(), false);
}

BucketCaps Reducer::caps() const {
  BucketCaps caps;
  caps.bytes = options_.bucket_cap_bytes;
  caps.first_bytes = options_.first_bucket_cap_bytes;
  caps.tail_bytes = options_.tail_bucket_cap_bytes;
  caps.early_bytes = options_.early_bucket_cap_bytes;
  return caps;
}

// A bucket can be a view when its gradients are back to back in the flat buffer, in bucket order
// (alignment padding between them is all-reduced along, harmlessly: it stays zero).
bool Reducer::contiguous_in_arena(const std::vector<size_t>& bucket) const {
  int64_t end = params_[bucket.front()].offset;
  for (size_t i : bucket) {
    const ReducerParam& p = params_[i];
    if (p.offset < end || p.offset - end >= 16) return false;
    end = p.offset + p.tensor.numel();
  }
  return true;
}

void Reducer::build_buckets(const BucketAssignment& assignment) {
  buckets_.clear();
  state_.clear();
  tail_buckets_ = assignment.tail_buckets;
  bucket_of_.assign(params_.size(), 0);
  for (size_t b = 0; b < assignment.buckets.size(); ++b) {
    Bucket bucket;
    bucket.info.params = assignment.buckets[b];
    const int64_t begin = params_[bucket.info.params.front()].offset;
    int64_t end = begin;
    for (size_t i : bucket.info.params) {
      bucket_of_[i] = b;
      end = params_[i].offset + params_[i].tensor.numel();
      bucket.info.bytes += params_[i].tensor.nbytes();
    }
    bucket.info.is_view = options_.grad_as_bucket_view && contiguous_in_arena(bucket.info.params);
    GradBucket& view = bucket.view;
    view.index = b;
    view.params = bucket.info.params;
    if (bucket.info.is_view) {
      bucket.info.numel = end - begin;
      view.buffer = flat_grads_.as_strided({end - begin}, {1}, flat_grads_.storage_offset() + begin);
      for (size_t i : bucket.info.params) view.offsets.push_back(params_[i].offset - begin);
    } else {
      int64_t n = 0;
      for (size_t i : bucket.info.params) {
        view.offsets.push_back(n);
        n += params_[i].tensor.numel();
      }
      bucket.info.numel = n;
      view.buffer = Tensor::empty({n}, flat_grads_.dtype(), flat_grads_.device());
    }
    for (size_t i : bucket.info.params) view.shapes.push_back(params_[i].tensor.shape());
    buckets_.push_back(bucket.info);
    state_.push_back(std::move(bucket));
  }
  plan_launch_order();
}

// Note [Launch order]
// Buckets launch in index order (ready order, the last layers' first) until ready_order_share of
// the bytes is sent, enough to keep a link slower than backward (P2P off) busy while backward
// runs; the rest launch in reverse index order, the first layers' bucket first, as soon as
// backward has made it. With each bucket's update applied at the next forward's first use of its
// parameters, that forward runs beside the all-reduce of its later layers instead of after all.
// held_buckets = H holds buckets 1..H (the layers right before the last, ready early) and sends
// them after all others, in reverse index order: else the last bucket sent holds middle layers
// and most of the next forward runs with the link idle (traced in docs/performance.md); held,
// the link's last bytes are layers the forward reaches at its end. They cost no link time during
// backward, where the link is behind anyway. Invariant: the order follows from the buckets
// alone, so every rank issues the same sequence of collectives.
void Reducer::plan_launch_order() {
  const size_t n = state_.size();
  const size_t held = n > 1 ? std::min(options_.held_buckets, n - 1) : 0;
  double total = 0;
  for (const Bucket& b : state_) total += static_cast<double>(b.info.bytes);
  launch_order_.clear();
  size_t next = 0;  // the next bucket in index order, the held ones skipped
  double sent = 0;
  while (next < n && (launch_order_.empty() || sent < options_.ready_order_share * total)) {
    sent += static_cast<double>(state_[next].info.bytes);
    launch_order_.push_back(next);
    next = next == 0 ? held + 1 : next + 1;
  }
  in_index_order_ = launch_order_.size();
  for (size_t b = n; b-- > next;) launch_order_.push_back(b);
  for (size_t b = held; b >= 1; --b) launch_order_.push_back(b);  // `next` is past them all
  held_launches_ = held;
  for (Bucket& b : state_) b.view.is_last = false;
  state_[launch_order_.back()].view.is_last = true;  // hooks count steps by it
}

void Reducer::prepare_for_backward() {
  // Before a no-sync micro-batch too: its backward accumulates into the buckets' gradients.
  for (const Bucket& b : state_)
    VITDDP_CHECK(!b.work, "Reducer: bucket ", b.view.index, " of the last step was never waited for ",
                 "(finalize_deferred() needs wait_bucket() or wait_all() before the next backward)");
  if (!sync_) return;
  VITDDP_CHECK(!in_backward_, "Reducer: prepare_for_backward() called twice without finalize()");
  in_backward_ = true;
  std::fill(ready_.begin(), ready_.end(), false);
  ready_order_.clear();
  for (Bucket& b : state_) b.pending = b.info.params.size();
  next_launch_ = 0;
}

void Reducer::mark_ready(size_t param) {
  if (!sync_) return;
  VITDDP_ASSERT(in_backward_, "mark_ready outside a backward pass");
  VITDDP_ASSERT(param < params_.size(), "mark_ready: bad parameter index");
  VITDDP_CHECK(!ready_[param], "Reducer: parameter ", params_[param].name,
               " got its gradient twice in one backward pass; DDP supports each parameter once per backward "
               "(use --accumulate K for several forward/backward passes per step)");
  ready_[param] = true;
  ready_order_.push_back(param);
  Bucket& bucket = state_[bucket_of_[param]];
  if (--bucket.pending == 0) bucket_complete(bucket);
  launch_ready_buckets();
}

void Reducer::bucket_complete(Bucket& bucket) {
  if (observer_) observer_->bucket_ready(bucket.view.index, bucket.info);
}

void Reducer::launch_ready_buckets() {
  while (next_launch_ < launch_order_.size() && state_[launch_order_[next_launch_]].pending == 0)
    launch(state_[launch_order_[next_launch_++]]);
}

void Reducer::launch(Bucket& bucket) {
  if (!bucket.info.is_view) {
    // Copy the gradients into the bucket (same stream, so ordered after their producers).
    for (size_t k = 0; k < bucket.view.params.size(); ++k) {
      const Tensor grad = params_[bucket.view.params[k]].tensor.grad();
      bucket.view.buffer.as_strided({grad.numel()}, {1}, bucket.view.buffer.storage_offset() + bucket.view.offsets[k])
          .copy_(grad.contiguous().view_as_shape({grad.numel()}));
    }
  }
  bucket.finish_told = false;
  if (observer_) observer_->launch_begin(bucket.view.index, bucket.info);
  {
    NvtxRange range(nvtx_allreduce_name(bucket.view.index, bucket.info.bytes), NvtxColor::kComm);
    bucket.work = hook_->run(group_, bucket.view);
  }
  if (observer_) observer_->launch_end(bucket.view.index, bucket.info);
  if (launch_listener_) launch_listener_(bucket.view.index);
}

void Reducer::copy_out(Bucket& bucket) {
  for (size_t k = 0; k < bucket.view.params.size(); ++k) {
    Tensor grad = params_[bucket.view.params[k]].tensor.grad();
    grad.copy_(bucket.view.buffer.as_strided(grad.shape(), contiguous_strides(grad.shape()),
                                             bucket.view.buffer.storage_offset() + bucket.view.offsets[k]));
  }
}

// Unused parameters, then checks that every bucket was launched.
void Reducer::finish_backward() {
  VITDDP_CHECK(in_backward_, "Reducer: finalize() without prepare_for_backward()");
  in_backward_ = false;
  std::vector<std::string> unused;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) unused.push_back(params_[i].name);
  if (!unused.empty()) {
    if (!options_.find_unused_parameters) {
      std::string names;
      for (size_t k = 0; k < unused.size() && k < 5; ++k) names += (k ? ", " : "") + unused[k];
      if (unused.size() > 5) names += " and " + std::to_string(unused.size() - 5) + " more";
      throw Error("DDP: " + std::to_string(unused.size()) + " parameter(s) received no gradient in this backward: " +
                  names +
                  ". They did not take part in computing the loss; set find_unused_parameters (train: --set "
                  "find-unused-parameters=true) to all-reduce their (zero) gradients anyway, or remove them from "
                  "the model");
    }
    // Their gradients are zero, or under --accumulate what earlier micro-batches of the step
    // left in them: all-reduce them like the others.
    for (size_t i = 0; i < params_.size(); ++i) {
      if (ready_[i]) continue;
      ready_[i] = true;
      Bucket& bucket = state_[bucket_of_[i]];
      if (--bucket.pending == 0) bucket_complete(bucket);
    }
    launch_ready_buckets();
  }
  VITDDP_ASSERT(next_launch_ == launch_order_.size(), "finalize: not every bucket was launched");
}

void Reducer::wait_bucket(size_t b) {
  VITDDP_ASSERT(b < state_.size(), "wait_bucket: no bucket ", b);
  Bucket& bucket = state_[b];
  if (!bucket.work) return;
  bucket.work->wait();
  if (observer_ && !bucket.finish_told) observer_->bucket_finished(bucket.view.index, bucket.info);
  bucket.finish_told = true;
  if (!bucket.info.is_view) copy_out(bucket);
  bucket.work.reset();
}

void Reducer::wait_all() {
  for (size_t b : launch_order_) wait_bucket(b);
}

std::vector<std::pair<int64_t, int64_t>> Reducer::flat_ranges(size_t b) const {
  VITDDP_ASSERT(b < state_.size(), "flat_ranges: no bucket ", b);
  const BucketInfo& info = state_[b].info;
  const int64_t first = params_[info.params.front()].offset;
  if (info.is_view) return {{first, first + info.numel}};  // back to back (contiguous_in_arena)
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (size_t i : info.params) ranges.emplace_back(params_[i].offset, params_[i].offset + params_[i].tensor.numel());
  return ranges;
}

bool Reducer::rebuild_pending() const { return options_.rebuild_buckets && !order_checked_; }

void Reducer::wait_all_then_rebuild() {
  wait_all();
  if (rebuild_pending()) rebuild_from_ready_order();
}

void Reducer::finalize() {
  if (!sync_) return;
  finish_backward();
  wait_all_then_rebuild();
}

void Reducer::finalize_deferred() {
  if (!sync_) return;
  finish_backward();
  // The rebuild replaces the buckets: nothing of the old ones may stay in flight.
  if (rebuild_pending()) return wait_all_then_rebuild();
  // An observer hears now of buckets not waited for yet, when the waits are left to the caller
  // (on the GPU it reads the communication stream's own marks; on the CPU this is when the
  // backward ended). Buckets waited for during backward (distributed/update/sharded.h)
  // were told then.
  for (Bucket& b : state_) {
    if (observer_ && !b.finish_told) observer_->bucket_finished(b.view.index, b.info);
    b.finish_told = true;
  }
}

// Note [Bucket rebuild]
// Buckets start in reverse registration order, a guess at the ready order; since buckets launch
// in index order, one that completes before a lower-indexed one waits for it. After the first
// synchronised backward the reducer measures that stall (the gradient bytes that arrived while a
// complete bucket waited) and, when there was any, assigns buckets again from the observed ready
// order (unused parameters last; each bucket's parameters sorted by arena offset, so contiguous
// ones stay views). It switches only when the new buckets are all views, or when gradients are
// copies anyway (--grad-as-bucket-view=false): with views the gradient layout is the arena's,
// fixed at start, so a rebuild never trades views for copies. Rank 0 decides and broadcasts its
// choice and order, so every rank does the same; the hook is told (PowerSGD starts its per-bucket
// state again). Once per run, like PyTorch's rebuild; the buckets in use are saved with
// checkpoints and restored on resume (restore_buckets).
void Reducer::restore_buckets(const std::vector<std::vector<size_t>>& buckets) {
  VITDDP_CHECK(!in_backward_, "Reducer: restore_buckets() during a backward pass");
  std::vector<bool> seen(params_.size(), false);
  for (size_t b = 0; b < buckets.size(); ++b) {
    VITDDP_CHECK(!buckets[b].empty(), "saved buckets: bucket ", b, " is empty");
    for (size_t i : buckets[b]) {
      VITDDP_CHECK(i < params_.size(), "saved buckets: bucket ", b, " names parameter ", i, " but the model has ",
                   params_.size());
      VITDDP_CHECK(!seen[i], "saved buckets: parameter ", i, " (", params_[i].name, ") is in two buckets");
      VITDDP_CHECK(dtypes_[i] == dtypes_[buckets[b].front()], "saved buckets: bucket ", b, " mixes gradient dtypes");
      seen[i] = true;
    }
  }
  for (size_t i = 0; i < params_.size(); ++i)
    VITDDP_CHECK(seen[i], "saved buckets: parameter ", i, " (", params_[i].name, ") is in no bucket");
  build_buckets(BucketAssignment{buckets});
  order_checked_ = true;
}

double Reducer::stall_fraction() const {
  std::vector<size_t> position(params_.size(), ready_order_.size());  // unused: at the end
  std::vector<double> arrived(ready_order_.size() + 1, 0.0);           // bytes arrived before position k
  for (size_t k = 0; k < ready_order_.size(); ++k) {
    position[ready_order_[k]] = k;
    arrived[k + 1] = arrived[k] + static_cast<double>(bytes_[ready_order_[k]]);
  }
  double total = 0, worst = 0;
  for (size_t b : bytes_) total += static_cast<double>(b);
  size_t launch = 0;  // launches happen in order: at the latest completion so far
  // Only the buckets launched in index order: the others wait for the end of backward by design
  // (Note [Launch order]).
  for (size_t k = 0; k < in_index_order_; ++k) {
    const Bucket& bucket = state_[launch_order_[k]];
    size_t complete = 0;
    for (size_t i : bucket.info.params) complete = std::max(complete, position[i]);
    launch = std::max(launch, complete);
    const size_t from = std::min(complete + 1, ready_order_.size()), to = std::min(launch + 1, ready_order_.size());
    worst = std::max(worst, arrived[to] - arrived[from]);
  }
  return total > 0 ? worst / total : 0.0;
}

void Reducer::rebuild_from_ready_order() {
  order_checked_ = true;
  std::vector<bool> listed(params_.size(), false);
  std::vector<size_t> order;
  for (size_t i : ready_order_) {
    order.push_back(i);
    listed[i] = true;
  }
  for (size_t i = params_.size(); i-- > 0;)
    if (!listed[i]) order.push_back(i);
  auto assign = [&](const std::vector<size_t>& sequence) {
    BucketAssignment a = compute_bucket_assignment(bytes_, dtypes_, caps(), sequence);
    for (std::vector<size_t>& bucket : a.buckets)
      std::sort(bucket.begin(), bucket.end(), [&](size_t x, size_t y) { return params_[x].offset < params_[y].offset; });
    return a;
  };
  // Rank 0's decision and order: [rebuild?, order...].
  bool rebuild = false;
  const double stall = group_.rank() == 0 ? stall_fraction() : 0.0;
  if (stall > 0.0) {
    const BucketAssignment candidate = assign(order);
    bool all_views = true;
    for (const std::vector<size_t>& bucket : candidate.buckets) all_views = all_views && contiguous_in_arena(bucket);
    rebuild = all_views || !options_.grad_as_bucket_view;
  }
  std::vector<int64_t> message = {rebuild ? 1 : 0};
  for (size_t i : order) message.push_back(static_cast<int64_t>(i));
  Tensor shared =
      Tensor::from_vector_i64(message, {static_cast<int64_t>(message.size())}).to(flat_grads_.device());
  group_.broadcast(shared, 0)->wait();
  const std::vector<double> rank0 = shared.to(Device::cpu()).to_vector();
  if (rank0[0] == 0) return;
  std::vector<size_t> rank0_order;
  for (size_t k = 1; k < rank0.size(); ++k) rank0_order.push_back(static_cast<size_t>(rank0[k]));
  build_buckets(assign(rank0_order));
  ++rebuilds_;
  hook_->buckets_rebuilt();
}

}  // namespace vitddp
