#include "distributed/overlapped_update.h"

#include "framework/core/error.h"
#include "framework/core/nvtx.h"

namespace vitddp {

// Note [Updates in the next forward]
// Plain DDP ends a step with every bucket's all-reduce done and one optimizer pass, and the
// next forward starts after both. Where the link is slower than backward (P2P off: one bf16
// step's gradients take 24 ms on the wire, backward 9 ms), the link then idles through
// the optimizer and the whole next forward. Here a step ends when backward's work is issued:
// the buckets stay in flight, and the optimizer's update of a bucket (Note [An update in ranges]
// in framework/optim/optimizer.h) is applied when the next forward is about to run a module
// that owns one of its parameters: the compute stream waits for that bucket's communication
// only, then updates that bucket's range of the arena, and runs the module. With the buckets the
// next forward needs first launched first (Note [Launch order] in reducer.cpp), the forward of
// the first layers runs while the later layers' gradients are still on the wire.
//
// Buckets launched in ready order before others sent after backward are updated at the end of
// backward instead (see after_backward()). The result is the same update, element by element, as finalize() + step(): bit-identical
// weights. What it asks of the caller: nothing reads or saves weights, and no backward writes
// gradients, while updates are pending (flush() first); the non-finite report of a step is
// complete only once its updates are (the trainer reads it after the flush); --nonfinite skip,
// which scans every gradient before any update, does not combine with it.
OverlappedUpdate::OverlappedUpdate(Reducer& reducer, Optimizer& optimizer, const ParamArena& arena, Module& model)
    : reducer_(reducer), optimizer_(optimizer), model_(model) {
  for (size_t i = 0; i < arena.size(); ++i) param_at_[arena.named_params()[i].second.data_ptr()] = i;
  model_.set_forward_pre_hook([this](const Module& module) { before_forward(module); });
}

OverlappedUpdate::~OverlappedUpdate() { model_.set_forward_pre_hook(nullptr); }

void OverlappedUpdate::after_backward() {
  VITDDP_CHECK(pending_count_ == 0, "OverlappedUpdate: the last step's updates were not all applied before this "
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

const std::vector<size_t>& OverlappedUpdate::params_of(const Module& module) {
  auto found = own_params_.find(&module);
  if (found != own_params_.end()) return found->second;
  std::vector<size_t>& indices = own_params_[&module];
  for (const auto& [name, tensor] : module.own_parameters()) {
    auto at = param_at_.find(tensor.data_ptr());
    VITDDP_CHECK(at != param_at_.end(), "OverlappedUpdate: parameter ", name, " of a module is not in the arena");
    indices.push_back(at->second);
  }
  return indices;
}

void OverlappedUpdate::before_forward(const Module& module) {
  if (pending_count_ == 0) return;
  for (size_t i : params_of(module)) {
    const size_t b = reducer_.bucket_of(i);
    if (pending_[b]) apply(b);
  }
}

void OverlappedUpdate::flush() {
  if (pending_count_ == 0) return;
  for (size_t b : reducer_.launch_order())
    if (pending_[b]) apply(b);
}

// The gradient buffer's layout is the arena's (the reducer's offsets are arena offsets), so a
// bucket's ranges of the one are its ranges of the other: one update for a bucket view.
void OverlappedUpdate::apply(size_t b) {
  NvtxRange range(nvtx_update_name(static_cast<int>(b)), NvtxColor::kOptimizer);
  reducer_.wait_bucket(b);
  for (const auto& [begin, end] : reducer_.flat_ranges(b)) optimizer_.update(begin, end);
  pending_[b] = false;
  --pending_count_;
}

}  // namespace vitddp
