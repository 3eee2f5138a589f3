#include "distributed/update/next_forward.h"

#include "framework/core/error.h"
#include "framework/core/nvtx.h"

namespace vitddp {

// Note [Updates in the next forward]
// Decision: where the link is slower than backward (no peer access, bf16), end a step when
// backward's work is issued and apply each bucket's update (Note [An update in ranges] in
// framework/optim/optimizer.h) when the next forward is about to run a module that owns one of
// its parameters: the compute stream waits for that bucket's communication only, so the link
// keeps sending beside the forward instead of idling through the update and the whole forward.
// With the buckets the next forward needs first launched first (Note [Launch order] in
// distributed/reducer.cpp), the first layers' forward runs while the later layers' gradients are
// still on the wire. Invariant: the same update, element by element, as finalize() + step(). It asks that
// nothing reads weights or writes gradients while updates are pending (flush() first), and
// --nonfinite stop: a step's report is complete only once its updates are.
NextForwardUpdate::NextForwardUpdate(Reducer& reducer, Optimizer& optimizer, const ParamArena& arena, Module& model,
                                     Tensor report)
    : reducer_(reducer), optimizer_(optimizer), model_(model), report_(std::move(report)) {
  // A clip scales every update by the norm of all the gradients: no bucket could go first.
  VITDDP_CHECK(!optimizer.grad_clip(), "update next-forward cannot clip the gradient norm: each bucket is updated "
               "before the others are reduced (use after-backward or sharded)");
  if (report_.defined()) done_report_ = report_.clone();
  for (size_t i = 0; i < arena.size(); ++i) param_at_[arena.named_params()[i].second.data_ptr()] = i;
  model_.set_forward_pre_hook([this](const Module& module) { before_forward(module); });
}

NextForwardUpdate::~NextForwardUpdate() { model_.set_forward_pre_hook(nullptr); }

void NextForwardUpdate::before_backward(int64_t micro) {
  flush();  // parameters the forward did not use, before backward rewrites their gradients
  if (micro == 0 && report_.defined()) done_report_.copy_(report_);  // the last step's updates have all run
}

void NextForwardUpdate::after_backward(bool sync) {
  if (!sync) return;  // an accumulation micro-batch: nothing was launched
  VITDDP_CHECK(pending_count_ == 0, "NextForwardUpdate: the last step's updates were not all applied before this "
               "backward (flush() before backward)");
  reducer_.finalize_deferred();
  optimizer_.begin_step();
  pending_.assign(reducer_.buckets().size(), true);  // the buckets may have been rebuilt
  pending_count_ = pending_.size();
  // With buckets sent after backward (Note [Launch order]), the next forward first waits for the
  // first of those, which the communication stream runs after every bucket launched in ready
  // order: updating those now costs the GPU nothing, and takes their updates out of the end of
  // the next forward, which runs after the link's last bucket.
  const size_t in_ready_order = reducer_.ready_order_launches();
  if (in_ready_order < pending_.size())
    for (size_t k = 0; k < in_ready_order; ++k) apply(reducer_.launch_order()[k]);
}

const std::vector<size_t>& NextForwardUpdate::params_of(const Module& module) {
  auto found = own_params_.find(&module);
  if (found != own_params_.end()) return found->second;
  std::vector<size_t>& indices = own_params_[&module];
  for (const auto& [name, tensor] : module.own_parameters()) {
    auto at = param_at_.find(tensor.data_ptr());
    VITDDP_CHECK(at != param_at_.end(), "NextForwardUpdate: parameter ", name, " of a module is not in the arena");
    indices.push_back(at->second);
  }
  return indices;
}

void NextForwardUpdate::before_forward(const Module& module) {
  if (pending_count_ == 0) return;
  for (size_t i : params_of(module)) {
    const size_t b = reducer_.bucket_of(i);
    if (pending_[b]) apply(b);
  }
}

void NextForwardUpdate::flush() {
  if (pending_count_ == 0) return;
  for (size_t b : reducer_.launch_order())
    if (pending_[b]) apply(b);
}

// The gradient buffer's layout is the arena's (the reducer's offsets are arena offsets), so a
// bucket's ranges of the one are its ranges of the other: one update for a bucket view.
void NextForwardUpdate::apply(size_t b) {
  NvtxRange range(nvtx_update_name(static_cast<int>(b)), NvtxColor::kOptimizer);
  reducer_.wait_bucket(b);
  for (const auto& [begin, end] : reducer_.flat_ranges(b)) optimizer_.update(begin, end);
  pending_[b] = false;
  --pending_count_;
}

}  // namespace vitddp
