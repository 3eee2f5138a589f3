// PowerSGD (Vogels et al. 2019; PyTorch's powerSGD_hook): each bucket's gradient matrices are
// sent as low-rank factors. Per matrix M (n x m, the tensor viewed as (shape[0], rest)):
// P = M Q, all-reduce P, orthonormalise P, Q = M^T P, all-reduce Q, M ~ P Q^T / world.
// Error feedback adds what compression lost last step to this step's gradient; warm start
// reuses Q across steps; before `start_iter` steps it is a plain all-reduce; 1-D tensors and
// matrices that compression would not shrink by `min_compression_rate` go uncompressed.
// A step whose gradients are not finite leaves the state as it was (Note [PowerSGD and skipped
// steps] in the .cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "distributed/comm_hook.h"
#include "framework/cpu/low_rank.h"

namespace vitddp {

struct PowerSgdOptions {
  int64_t rank = 1;                   // --powersgd-rank
  int64_t start_iter = 2;             // steps of plain all-reduce first
  double min_compression_rate = 2.0;  // compress only if (n + m) r * rate < n m
  bool error_feedback = true;
  bool warm_start = true;
  uint64_t seed = 0;                  // initial Q: the same on every rank
  // The new error and Q go to scratch tensors, committed at the step's end unless it is skipped
  // (Note [PowerSGD and skipped steps]): what --nonfinite skip needs. Off (--nonfinite stop,
  // where a non-finite step ends the run and no checkpoint is written after it), they are
  // updated in place: one f32 copy of the gradients less in memory, and no copy back.
  bool stage_state = true;
  // The error feedback (and M, which becomes it) in the bucket's own dtype, as PyTorch's hook
  // keeps it, instead of f32: with 16-bit buckets the hook's passes over the bucket move about
  // half the bytes (Note [A 16-bit error] in the .cpp). Expert key `powersgd-error-dtype bucket`.
  bool error_in_bucket_dtype = false;
  // With error feedback, P = M Q fused into the compensation and Q = M^T P as a pass of its own
  // (Note [PowerSGD's products as bucket passes]) where the kernels take the bucket's groups;
  // off, both products go through the matrix-product library. No key sets it (the passes always
  // won where they apply); tests turn it off to compare the two paths.
  bool bucket_pass_products = true;
  // With the passes and warm start, the approximation sent is subtracted from the error by the
  // next step's compensation, not by the expansion (Note [The error settled a step late]).
  // No key sets it (settling late always paid where it applies); tests compare it with eager.
  bool settle_error_late = true;
};

// The run's PowerSGD state: per bucket, the error-feedback buffer and the Q factors. It differs
// per rank (the errors are local) and belongs in each rank's checkpoint. `iter` counts the steps
// communicated, skipped ones included; the buckets change only in steps that were not skipped.
struct PowerSgdState {
  struct Bucket {
    Tensor error;  // (bucket numel) f32 or the bucket's dtype, what the last compression did not send
    Tensor q;      // all Q matrices of the bucket back to back, f32
    // With the products as passes and warm start, the approximation sent is subtracted from the
    // error by the next step's compensation (Note [The error settled a step late] in the .cpp):
    // over the matrices of `settle_groups`, `error` then holds last step's M and the error is
    // error - P Q^T, P being `sent_p` (f32, laid out as the bucket's P). Zero or undefined: the
    // error is `error` itself. PowerSgdHook::settle_errors() makes it so.
    Tensor sent_p;
    std::vector<LowRankGroup> settle_groups;
  };
  int64_t iter = 0;
  std::map<size_t, Bucket> buckets;
};

class PowerSgdHook final : public CommHook {
 public:
  explicit PowerSgdHook(const PowerSgdOptions& options);
  std::string name() const override;
  // "powersgd: N bucket compression(s) issued, ..." once it compressed.
  std::string summary() const override;
  std::shared_ptr<Work> run(ProcessGroup& group, GradBucket& bucket) override;
  const PowerSgdState& state() const { return state_; }
  PowerSgdState& state() { return state_; }
  // Subtracts every bucket's pending approximation from its error buffer (Note [The error settled
  // a step late]), so that state().buckets[i].error is the error itself; the next step works from
  // it unchanged (up to the rounding of the stored error). On the current stream, between steps.
  void settle_errors();
  // Bucket `index`'s error feedback as a new tensor, the state left as it is.
  Tensor settled_error(size_t index) const;
  const PowerSgdOptions& options() const { return options_; }
  // Buckets changed (the reducer's one rebuild): per-bucket errors and Q start again.
  void buckets_rebuilt() override {
    state_.buckets.clear();
    staged_.reset();
    factor_buffers_.clear();
    compressed_since_rebuild_ = false;
  }
  // After one compressed step with these buckets: their errors and Q exist (the first step makes
  // Q on the host and copies it over) and the products' shapes are tuned. Without warm start,
  // never: every step copies a new Q from the host.
  bool steady() const override {
    return compressed_since_rebuild_ && options_.warm_start && state_.iter > options_.start_iter;
  }
  void replayed() override { ++state_.iter; }
  // Buckets compressed with the products as passes (Note [PowerSGD's products as bucket passes]),
  // not through the matrix-product library, since the hook was made.
  int64_t buckets_by_passes() const { return buckets_by_passes_; }
  // Of those, the buckets whose error was settled a step late (Note [The error settled a step late]).
  int64_t buckets_settled_late() const { return buckets_settled_late_; }
  // Buckets compressed (a bucket with matrices, past the start iteration), by any path.
  int64_t buckets_compressed() const { return buckets_compressed_; }

  struct Staged;      // one step's new bucket states, committed together (defined in the .cpp)
  struct SideStream;  // the GPU stream the compression runs on (defined in the .cpp)

 private:
  PowerSgdOptions options_;
  PowerSgdState state_;
  std::shared_ptr<Staged> staged_;
  std::shared_ptr<SideStream> side_;
  bool compressed_since_rebuild_ = false;
  int64_t buckets_by_passes_ = 0, buckets_settled_late_ = 0, buckets_compressed_ = 0;
  // Per bucket, the f32 buffer P (and the uncompressed tensors) is all-reduced from (Note
  // [PowerSGD's P buffers]).
  std::map<size_t, Tensor> factor_buffers_;
  Tensor factor_buffer(size_t bucket, int64_t numel, const Device& device);
};

std::unique_ptr<CommHook> make_powersgd_hook(const PowerSgdOptions& options);

}  // namespace vitddp
