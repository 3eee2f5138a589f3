#include "data/loader.h"

#include <algorithm>
#include <chrono>
#include <system_error>

#include "data/image/image.h"
#include "framework/core/error.h"
#include "framework/core/random.h"

namespace vitddp {

DataLoader::DataLoader(const Dataset& dataset, const DistributedSampler& sampler, const LoaderOptions& options)
    : DataLoader(dataset, std::make_shared<DistributedSampler>(sampler), sampler.epoch(), options) {}

DataLoader::DataLoader(const Dataset& dataset, std::shared_ptr<const SampleOrder> order, int64_t first_epoch,
                       const LoaderOptions& options)
    : dataset_(dataset), order_(std::move(order)), options_(options) {
  VITDDP_CHECK(options.batch_size > 0, "data loader: batch size must be positive, got ", options.batch_size);
  VITDDP_CHECK(options.num_workers >= 0, "data loader: num_workers must be >= 0, got ", options.num_workers);
  prefetch_ = options.prefetch.value_or(std::max(4, 2 * options.num_workers));
  VITDDP_CHECK(prefetch_ >= 1, "data loader: prefetch must be >= 1, got ", prefetch_);
  VITDDP_CHECK(options.start_step >= 0 && options.start_step <= (int64_t{1} << 53),
               "data loader: start_step must be in [0, 2^53], got ", options.start_step);
  VITDDP_CHECK(options.max_bad_samples >= 0, "data loader: max_bad_samples must be >= 0");
  const int64_t n = order_->num_samples();
  batches_per_epoch_ = options.drop_last ? n / options.batch_size : (n + options.batch_size - 1) / options.batch_size;
  VITDDP_CHECK(batches_per_epoch_ > 0, "data loader: ", n, " samples per rank and epoch make no full batch of ",
               options.batch_size, " with drop_last");
  first_epoch_ = first_epoch;
  if (!options_.allocator) options_.allocator = [](const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype); };
  next_claim_ = next_return_ = options.start_step;
  {
    // The sampler must index into this dataset; check once with the first epoch's indices.
    std::lock_guard<std::mutex> lock(mu_);
    auto first = indices_locked(epoch_of(next_return_));
    const int64_t max_index = first->empty() ? -1 : *std::max_element(first->begin(), first->end());
    VITDDP_CHECK(max_index < dataset.size(), "data loader: the sampler yields index ", max_index,
                 " but the dataset has only ", dataset.size(), " samples");
  }
  try {
    for (int i = 0; i < options.num_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    // Out of threads (a pids limit): stop and join those started, or their destruction would
    // terminate the program, and say so in one line.
    const size_t started = workers_.size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    throw Error(detail::concat("data loader: cannot start worker thread ", started + 1, " of ", options.num_workers,
                               " (", e.what(), "); use fewer --workers"));
  }
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  ready_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

std::shared_ptr<const std::vector<int64_t>> DataLoader::indices_locked(int64_t epoch) {
  // Drop index lists of epochs the consumer has left (workers keep their own reference).
  const int64_t oldest = epoch_of(next_return_);
  while (!epoch_indices_.empty() && epoch_indices_.begin()->first < oldest) epoch_indices_.erase(epoch_indices_.begin());
  auto it = epoch_indices_.find(epoch);
  if (it != epoch_indices_.end()) return it->second;
  auto indices = std::make_shared<const std::vector<int64_t>>(order_->indices_of(epoch));
  VITDDP_ASSERT(static_cast<int64_t>(indices->size()) == order_->num_samples(), "sample order of epoch ", epoch,
                " has ", indices->size(), " indices, not ", order_->num_samples());
  epoch_indices_[epoch] = indices;
  return indices;
}

void DataLoader::fill(int64_t epoch, const std::vector<int64_t>& indices, int64_t position, float* image,
                      int64_t* label) {
  const int64_t n = static_cast<int64_t>(indices.size());
  for (int64_t tried = 0; tried < n; ++tried) {
    const int64_t index = indices[(position + tried) % n];
    const uint64_t draw = mix64(mix64(options_.seed, static_cast<uint64_t>(epoch)), static_cast<uint64_t>(index));
    try {
      dataset_.get_drawn(index, draw, image, label);
      return;
    } catch (const BadSample& e) {
      std::lock_guard<std::mutex> lock(bad_mu_);
      if (!bad_.insert(index).second) continue;  // told already
      const int64_t count = static_cast<int64_t>(bad_.size());
      const std::string what = dataset_.sample_name(index) + ": " + e.what();
      VITDDP_CHECK(count <= options_.max_bad_samples, "data: ", count, " bad samples, more than the ",
                   options_.max_bad_samples, " allowed (bad-sample-limit); the last: ", what);
      if (options_.on_bad_sample)
        options_.on_bad_sample(what + " (" + std::to_string(count) + " bad sample" + (count == 1 ? "" : "s") +
                               " so far)");
    }
  }
  throw Error("data: every sample of the epoch is bad");
}

Batch DataLoader::build(int64_t step, const std::vector<int64_t>& indices) {
  const int64_t k = step % batches_per_epoch_;
  const int64_t begin = k * options_.batch_size;
  const int64_t count = std::min<int64_t>(options_.batch_size, static_cast<int64_t>(indices.size()) - begin);
  const Shape image = dataset_.image_shape();
  const Shape images_shape{count, image[0], image[1], image[2]};
  Batch b;
  b.epoch = epoch_of(step);
  b.step = step;
  b.images = options_.allocator(images_shape, DType::kF32);
  b.labels = options_.allocator({count}, DType::kI64);
  for (const Tensor* t : {&b.images, &b.labels})
    VITDDP_CHECK(t->defined() && t->device().is_cpu() && t->is_contiguous(),
                 "data loader: the batch allocator must return contiguous CPU tensors");
  VITDDP_CHECK(b.images.shape() == images_shape && b.images.dtype() == DType::kF32 && b.labels.shape() == Shape{count} &&
                   b.labels.dtype() == DType::kI64,
               "data loader: the batch allocator returned the wrong shape or dtype");
  float* img = b.images.data<float>();
  int64_t* lab = b.labels.data<int64_t>();
  const int64_t per = dataset_.image_numel();
  for (int64_t i = 0; i < count; ++i) fill(b.epoch, indices, begin + i, img + i * per, lab + i);
  if (options_.mixing) {
    Tensor targets = options_.allocator({count, options_.mixing->num_classes()}, DType::kF32);
    VITDDP_CHECK(targets.defined() && targets.device().is_cpu() && targets.is_contiguous(),
                 "data loader: the batch allocator must return contiguous CPU tensors");
    options_.mixing->mix(options_.mixing->draw(step, image[1], image[2]), b.images, b.labels, targets);
    b.labels = std::move(targets);
  }
  return b;
}

void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || next_claim_ < next_return_ + prefetch_; });
    if (stop_) return;
    const int64_t step = next_claim_++;
    Slot slot;
    try {
      auto indices = indices_locked(epoch_of(step));
      lock.unlock();
      slot.batch = build(step, *indices);
    } catch (...) {
      slot.error = std::current_exception();
    }
    if (!lock.owns_lock()) lock.lock();
    done_[step] = std::move(slot);
    ready_cv_.notify_all();
  }
}

Batch DataLoader::next() {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_) std::rethrow_exception(failed_);
  if (!started_) {
    started_ = true;
    start_time_ = t0;
  }
  Slot slot;
  const int64_t step = next_return_;
  if (workers_.empty()) {
    try {
      auto indices = indices_locked(epoch_of(step));
      slot.batch = build(step, *indices);
    } catch (...) {
      slot.error = std::current_exception();
    }
  } else {
    ready_cv_.wait(lock, [&] { return done_.count(step) > 0; });
    auto it = done_.find(step);
    slot = std::move(it->second);
    done_.erase(it);
  }
  ++next_return_;
  const auto t1 = Clock::now();
  stats_.wait_seconds += std::chrono::duration<double>(t1 - t0).count();
  stats_.elapsed_seconds = std::chrono::duration<double>(t1 - start_time_).count();
  if (slot.error) {
    failed_ = slot.error;
    stop_ = true;  // the loader is broken; let the workers finish
    lock.unlock();
    work_cv_.notify_all();
    std::rethrow_exception(failed_);
  }
  ++stats_.batches;
  stats_.images += slot.batch.images.shape()[0];
  lock.unlock();
  work_cv_.notify_all();
  return std::move(slot.batch);
}

LoaderStats DataLoader::stats() const {
  LoaderStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = stats_;
  }
  std::lock_guard<std::mutex> lock(bad_mu_);
  s.bad_samples = static_cast<int64_t>(bad_.size());
  return s;
}

}  // namespace vitddp
