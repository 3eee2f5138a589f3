// Reducer: gradient buckets all-reduced while backward runs. See Note [Reducer flow] in
// reducer.cpp. It knows parameters only as (index, tensor, name) and the gradient layout as
// offsets into one flat buffer; it never sees a model.
//
//   prepare_for_backward()  before each backward: every parameter pending
//   mark_ready(i)            from parameter i's gradient-ready hook
//   finalize()               after backward: unused parameters, wait for every bucket
// or, to use each bucket as soon as it is done (distributed/update/next_forward.h):
//   finalize_deferred()      after backward: unused parameters; no waits
//   wait_bucket(b)           each bucket, before its gradients are read (or wait_all())
// and, to follow each launch (distributed/update/sharded.h): set_launch_listener().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/bucketing.h"
#include "distributed/comm_hook.h"
#include "distributed/process_group.h"
#include "framework/core/tensor.h"

namespace vitddp {

struct ReducerParam {
  std::string name;
  Tensor tensor;          // the leaf; its .grad is a view of `flat_grads` at `offset`
  int64_t offset = 0;     // element offset of its gradient in the flat buffer
};

struct ReducerOptions {
  size_t bucket_cap_bytes = 25u << 20;       // --bucket-mb (PyTorch's default 25 MB)
  size_t first_bucket_cap_bytes = 1u << 20;  // a small first bucket starts communication early
  std::vector<size_t> early_bucket_cap_bytes;  // caps of buckets 1, 2, ... (Note [Early buckets]); then bucket_cap_bytes
  size_t tail_bucket_cap_bytes = 0;          // the last bucket_cap_bytes of gradients in buckets this small (Note [The tail buckets]); 0: off
  bool find_unused_parameters = false;
  bool grad_as_bucket_view = true;  // buckets are slices of the gradient buffer: no copies
  bool rebuild_buckets = true;      // once, from the order gradients arrived in (Note [Bucket rebuild])
  // Share of the gradient bytes whose buckets launch in index order; the rest launch in reverse
  // index order once backward has produced them all (Note [Launch order]). 1: all in index order.
  double ready_order_share = 1.0;
  // With ready_order_share < 1 (the trainer's condition; the order is defined for any share): how
  // many buckets after the first (the last layers' next ones) are
  // held back and launched last, so the link's last bytes of a step are layers the next forward
  // reaches last (Note [Launch order]). 0: none.
  size_t held_buckets = 0;
};

struct BucketInfo {
  std::vector<size_t> params;  // parameter indices in bucket order
  int64_t numel = 0;
  size_t bytes = 0;
  bool is_view = false;        // a slice of the flat gradient buffer (else copied in and out)
};

// Told when each bucket's communication happens, for timelines (--trace). Calls come from the
// training thread: bucket_ready when its last gradient arrives, launch_begin/launch_end around
// the hook issuing its work (in launch order: bucket-index order unless ready-order-share < 1,
// Note [Launch order]), bucket_finished after finalize() waited for
// it. The reducer does not own the observer.
class BucketObserver {
 public:
  virtual ~BucketObserver() = default;
  virtual void bucket_ready(size_t index, const BucketInfo& bucket) = 0;
  virtual void launch_begin(size_t index, const BucketInfo& bucket) = 0;
  virtual void launch_end(size_t index, const BucketInfo& bucket) = 0;
  virtual void bucket_finished(size_t index, const BucketInfo& bucket) = 0;
};

class Reducer {
 public:
  Reducer(std::vector<ReducerParam> params, Tensor flat_grads, ProcessGroup& group, std::unique_ptr<CommHook> hook,
          const ReducerOptions& options);
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  void prepare_for_backward();
  void mark_ready(size_t param);
  void finalize();
  // finalize() without the waits: every bucket stays in flight until wait_bucket() or
  // wait_all(), which must come before the next prepare_for_backward(). In the first
  // synchronised step, when the buckets may be rebuilt, it waits for all of them first.
  void finalize_deferred();
  // Waits for bucket b's communication (on NCCL: the current stream waits, not the host) and
  // copies results out of a bucket that is not a view. Nothing when it was waited for already.
  void wait_bucket(size_t b);
  void wait_all();
  // The bucket holding parameter i's gradient.
  size_t bucket_of(size_t param) const { return bucket_of_[param]; }
  // Element ranges [begin, end) of the flat gradient buffer that hold bucket b's gradients: one
  // for a bucket view (alignment padding inside it included, which stays zero), else one per
  // parameter.
  std::vector<std::pair<int64_t, int64_t>> flat_ranges(size_t b) const;
  // Bucket indices in the order their communication is launched (Note [Launch order]).
  const std::vector<size_t>& launch_order() const { return launch_order_; }
  // How many of those launch in ready order (index order, the held buckets skipped); the rest go
  // after backward, last first, the held ones last.
  size_t ready_order_launches() const { return in_index_order_; }
  // How many launch last of all: the held buckets (ReducerOptions::held_buckets, at most all but
  // the first).
  size_t held_launches() const { return held_launches_; }
  // How many of the last buckets hold the tail, cut to ReducerOptions::tail_bucket_cap_bytes
  // (0: none, or buckets restored from a checkpoint).
  size_t tail_buckets() const { return tail_buckets_; }

  // Skips communication (gradient accumulation steps): mark_ready() and finalize() do nothing.
  void set_sync(bool sync) { sync_ = sync; }
  // nullptr: none. Not owned; must outlive its use.
  void set_observer(BucketObserver* observer) { observer_ = observer; }
  // Called with a bucket's index right after its communication was launched (in launch order,
  // on the training thread, inside backward's gradient-ready hooks or finalize). Empty: none.
  using LaunchListener = std::function<void(size_t bucket)>;
  void set_launch_listener(LaunchListener listener) { launch_listener_ = std::move(listener); }
  // Whether the next synchronised step may rebuild the buckets (its finalize waits for them all
  // and may replace them: Note [Bucket rebuild]).
  bool rebuild_pending() const;
  const std::vector<BucketInfo>& buckets() const { return buckets_; }
  const CommHook& hook() const { return *hook_; }
  CommHook& hook() { return *hook_; }  // its state is restored from checkpoints
  // Order in which parameters became ready in the last backward (for tests and rebuilds).
  const std::vector<size_t>& ready_order() const { return ready_order_; }
  // Times the buckets were rebuilt from the observed order (0 or 1; see Note [Bucket rebuild]).
  int rebuilds() const { return rebuilds_; }
  // Uses these buckets (parameter indices per bucket, in bucket order: a checkpoint's) instead
  // of the current ones, and skips the rebuild check: a resumed run keeps the buckets its
  // hook state was saved with. Throws vitddp::Error unless every parameter is in exactly one
  // bucket and a bucket's parameters share a dtype.
  void restore_buckets(const std::vector<std::vector<size_t>>& buckets);

 private:
  struct Bucket {
    BucketInfo info;
    GradBucket view;           // what the hook gets
    size_t pending = 0;        // parameters not yet ready in this backward
    std::shared_ptr<Work> work;
    bool finish_told = false;  // the observer heard bucket_finished for its last launch
  };
  void build_buckets(const BucketAssignment& assignment);
  BucketCaps caps() const;  // options_ as the bucketing function takes them
  void rebuild_from_ready_order();
  double stall_fraction() const;
  bool contiguous_in_arena(const std::vector<size_t>& bucket) const;
  void bucket_complete(Bucket& bucket);
  void launch_ready_buckets();
  void plan_launch_order();
  void finish_backward();
  void wait_all_then_rebuild();
  void launch(Bucket& bucket);
  void copy_out(Bucket& bucket);

  std::vector<ReducerParam> params_;
  std::vector<size_t> bytes_;            // per parameter
  std::vector<DType> dtypes_;            // per parameter (its gradient's)
  Tensor flat_grads_;
  ProcessGroup& group_;
  std::unique_ptr<CommHook> hook_;
  ReducerOptions options_;
  std::vector<BucketInfo> buckets_;
  std::vector<Bucket> state_;
  std::vector<size_t> bucket_of_;        // parameter -> bucket index
  std::vector<bool> ready_;              // per parameter, this backward
  std::vector<size_t> ready_order_;
  std::vector<size_t> launch_order_;     // bucket indices, in launch order (Note [Launch order])
  size_t next_launch_ = 0;               // position in launch_order_ of the next launch
  size_t in_index_order_ = 0;            // the first launches, in index order
  size_t held_launches_ = 0;             // the last launches: the held buckets
  size_t tail_buckets_ = 0;              // the last buckets, cut to the tail cap (Note [The tail buckets])
  bool sync_ = true;
  bool in_backward_ = false;
  BucketObserver* observer_ = nullptr;
  LaunchListener launch_listener_;
  bool order_checked_ = false;           // the first synchronised backward has been seen
  int rebuilds_ = 0;
};

}  // namespace vitddp
