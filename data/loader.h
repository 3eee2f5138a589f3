// DataLoader: builds batches of (image, label) from a Dataset on worker threads, in the order of
// a DistributedSampler, ahead of the consumer (bounded prefetch).
//
// Batches are numbered by a global step 0, 1, 2, ... that runs across epochs: step s belongs to
// epoch sampler.epoch() + s / batches_per_epoch() and holds the samples of that epoch's index list
// at [k * batch_size, (k + 1) * batch_size) with k = s % batches_per_epoch(). The content of a
// batch depends on its step alone, so the sequence is the same for any number of workers and any
// thread timing. next() never runs out: after the last batch of an epoch comes the first batch of
// the next epoch (reshuffled by the sampler).
//
// A worker exception (e.g. a dataset error) is rethrown by the next() that would have returned
// that batch, and by every later next(). The destructor stops the workers and joins them; it
// does not wait for batches nobody asked for beyond those already being built.
//
// Note [Bad samples]
// A sample the dataset cannot use (BadSample: a corrupt, truncated or non-image file) never
// ends a run by itself: it is reported once (on_bad_sample, naming it), counted, and its place
// in the batch goes to the next sample of the epoch's order (wrapping), so that every batch
// keeps its size (a CUDA graph and the ranks' collectives depend on it) and the batches stay a
// function of the step. Past max_bad_samples distinct bad samples the loader stops with an
// error: a data set that damaged is not to be trained on silently.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/batch_mixing.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace vitddp {

// Allocates the batch tensors (CPU, contiguous; e.g. pinned host memory). Called from worker
// threads, so it must be thread-safe.
using BatchAllocator = std::function<Tensor(const Shape& shape, DType dtype)>;

struct LoaderOptions {
  int64_t batch_size = 32;
  int num_workers = 2;     // 0: each batch is built inside next(), on the caller's thread
  // At most this many batches built or being built ahead of the consumer. Unset: two per worker
  // and at least 4, so every worker has one to build while the consumer takes another (a fixed
  // 4 left workers beyond the fourth idle).
  std::optional<int> prefetch;
  bool drop_last = false;  // drop the last, partial batch of each epoch
  int64_t start_step = 0;  // to resume: the first next() returns global batch `start_step`
  BatchAllocator allocator;  // default: Tensor::empty(shape, dtype) on the CPU
  uint64_t seed = 0;       // the random transforms' draws: sample i of epoch e draws from (seed, e, i)
  int64_t max_bad_samples = 0;  // Note [Bad samples]: distinct bad samples allowed
  // Told once per bad sample: "NAME: what is wrong (N bad samples so far)". Called from worker
  // threads, one at a time. Default: nothing.
  std::function<void(const std::string&)> on_bad_sample;
  // Mixup / CutMix of each finished batch on its worker (data/batch_mixing.h); the batch's
  // labels are then soft targets (B, classes) f32. Null: labels (B) i64.
  std::shared_ptr<const BatchMixing> mixing;
};

struct LoaderStats {
  int64_t batches = 0;         // returned by next()
  int64_t images = 0;          // in those batches
  double wait_seconds = 0;     // time next() spent waiting for (or building) batches
  double elapsed_seconds = 0;  // since the first next() started
  int64_t bad_samples = 0;     // distinct samples skipped so far (Note [Bad samples])
  // Images per second delivered to the consumer since the first next().
  double images_per_second() const { return elapsed_seconds > 0 ? images / elapsed_seconds : 0.0; }
};

class DataLoader {
 public:
  // `dataset` must outlive the loader; `sampler` is copied (its epoch is the first epoch).
  DataLoader(const Dataset& dataset, const DistributedSampler& sampler, const LoaderOptions& options = {});
  // Any order, from `first_epoch` on.
  DataLoader(const Dataset& dataset, std::shared_ptr<const SampleOrder> order, int64_t first_epoch,
             const LoaderOptions& options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  Batch next();

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t batch_size() const { return options_.batch_size; }
  LoaderStats stats() const;

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  int64_t epoch_of(int64_t step) const { return first_epoch_ + step / batches_per_epoch_; }
  std::shared_ptr<const std::vector<int64_t>> indices_locked(int64_t epoch);
  Batch build(int64_t step, const std::vector<int64_t>& indices);
  // Sample `position` of the epoch's order into `image`, `label`; a bad one is replaced by the
  // next good one (Note [Bad samples]).
  void fill(int64_t epoch, const std::vector<int64_t>& indices, int64_t position, float* image, int64_t* label);
  void worker_loop();

  const Dataset& dataset_;
  std::shared_ptr<const SampleOrder> order_;
  LoaderOptions options_;
  int prefetch_ = 0;  // options_.prefetch, or its default for the workers
  int64_t first_epoch_ = 0;
  int64_t batches_per_epoch_ = 0;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // workers wait for room in the prefetch window
  std::condition_variable ready_cv_;  // the consumer waits for its batch
  bool stop_ = false;
  int64_t next_claim_ = 0;   // next step a worker will build
  int64_t next_return_ = 0;  // next step next() returns
  std::map<int64_t, Slot> done_;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> epoch_indices_;
  std::exception_ptr failed_;
  std::vector<std::thread> workers_;
  mutable std::mutex bad_mu_;  // the bad samples' record, shared by the workers
  std::set<int64_t> bad_;      // indices found bad

  LoaderStats stats_;
  bool started_ = false;
  std::chrono::steady_clock::time_point start_time_;
};

}  // namespace vitddp
