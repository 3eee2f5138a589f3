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
// but it is launched only when every bucket with a smaller index has been launched
// (next_bucket_), so every rank issues the same collectives in the same order, which NCCL
// requires. A launch hands the bucket to the comm hook, which starts an asynchronous
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
  std::vector<size_t> bytes;
  std::vector<DType> dtypes;
  for (const ReducerParam& p : params_) {
    VITDDP_CHECK(p.tensor.grad().defined(), "Reducer: parameter ", p.name, " has no gradient buffer");
    bytes.push_back(p.tensor.nbytes());
    dtypes.push_back(p.tensor.grad().dtype());
  }
  BucketAssignment assignment =
      compute_bucket_assignment(bytes, dtypes, options.bucket_cap_bytes, options.first_bucket_cap_bytes);
  bucket_of_.assign(params_.size(), 0);
  for (size_t b = 0; b < assignment.buckets.size(); ++b) {
    Bucket bucket;
    bucket.info.params = assignment.buckets[b];
    // A view when the bucket's gradients are back to back in the flat buffer, in bucket order
    // (alignment padding between them is all-reduced along, harmlessly: it stays zero).
    int64_t begin = params_[bucket.info.params.front()].offset;
    int64_t end = begin;
    bool contiguous = true;
    for (size_t i : bucket.info.params) {
      bucket_of_[i] = b;
      const ReducerParam& p = params_[i];
      if (p.offset < end || p.offset - end >= 16) contiguous = false;
      end = p.offset + p.tensor.numel();
      bucket.info.bytes += p.tensor.nbytes();
    }
    bucket.info.is_view = options.grad_as_bucket_view && contiguous;
    GradBucket& view = bucket.view;
    view.index = b;
    view.params = bucket.info.params;
    view.is_last = b + 1 == assignment.buckets.size();
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
  ready_.assign(params_.size(), false);
}

void Reducer::prepare_for_backward() {
  if (!sync_) return;
  VITDDP_CHECK(!in_backward_, "Reducer: prepare_for_backward() called twice without finalize()");
  in_backward_ = true;
  std::fill(ready_.begin(), ready_.end(), false);
  ready_order_.clear();
  for (Bucket& b : state_) {
    b.pending = b.info.params.size();
    b.work.reset();
  }
  next_bucket_ = 0;
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
  if (--bucket.pending == 0 && observer_) observer_->bucket_ready(bucket.view.index, bucket.info);
  launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_bucket_ < state_.size() && state_[next_bucket_].pending == 0) launch(state_[next_bucket_++]);
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
  if (observer_) observer_->launch_begin(bucket.view.index, bucket.info);
  {
    NvtxRange range(nvtx_allreduce_name(bucket.view.index, bucket.info.bytes), NvtxColor::kComm);
    bucket.work = hook_->run(group_, bucket.view);
  }
  if (observer_) observer_->launch_end(bucket.view.index, bucket.info);
}

void Reducer::copy_out(Bucket& bucket) {
  for (size_t k = 0; k < bucket.view.params.size(); ++k) {
    Tensor grad = params_[bucket.view.params[k]].tensor.grad();
    grad.copy_(bucket.view.buffer.as_strided(grad.shape(), contiguous_strides(grad.shape()),
                                             bucket.view.buffer.storage_offset() + bucket.view.offsets[k]));
  }
}

void Reducer::finalize() {
  if (!sync_) return;
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
                  ". They did not take part in computing the loss; pass --find-unused-parameters to "
                  "all-reduce their (zero) gradients anyway, or remove them from the model");
    }
    // Their gradients are the zeros the arena was cleared to: all-reduce them like the others.
    for (size_t i = 0; i < params_.size(); ++i) {
      if (ready_[i]) continue;
      ready_[i] = true;
      Bucket& bucket = state_[bucket_of_[i]];
      if (--bucket.pending == 0 && observer_) observer_->bucket_ready(bucket.view.index, bucket.info);
    }
    launch_ready_buckets();
  }
  VITDDP_ASSERT(next_bucket_ == state_.size(), "finalize: not every bucket was launched");
  for (Bucket& b : state_) {
    b.work->wait();
    if (observer_) observer_->bucket_finished(b.view.index, b.info);
    if (!b.info.is_view) copy_out(b);
    b.work.reset();
  }
}

}  // namespace vitddp
