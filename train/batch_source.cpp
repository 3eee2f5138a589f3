#include "train/batch_source.h"

#include <optional>
#include <string>

#include "data/sampler.h"
#include "framework/core/random.h"
#include "train/dataset_factory.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/host_memory.h"
#include "framework/cuda/random.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp {
namespace {

LoaderOptions loader_options(const BatchSourceOptions& o) {
  LoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.num_workers = o.workers;
  lo.start_step = o.start_step;
  lo.seed = o.seed_for_draws;
  lo.max_bad_samples = o.max_bad_samples;
  lo.mixing = o.mixing;
  lo.on_bad_sample = warn_of_bad_sample;
  return lo;
}

class CpuSource final : public BatchSource {
 public:
  CpuSource(const Dataset& dataset, std::shared_ptr<const SampleOrder> order, const BatchSourceOptions& o)
      : loader_(dataset, std::move(order), 0, loader_options(o)) {}
  Batch next() override { return loader_.next(); }
  double loader_images_per_second() const override { return loader_.stats().images_per_second(); }
  int64_t bad_samples() const override { return loader_.stats().bad_samples; }

 private:
  DataLoader loader_;
};

#if VITDDP_WITH_CUDA

LoaderOptions pinned_loader_options(const BatchSourceOptions& o) {
  LoaderOptions lo = loader_options(o);
  lo.allocator = [](const Shape& shape, DType dtype) {
    return Tensor::empty_with(shape, dtype, cuda::pinned_host_allocator());
  };
  return lo;
}

// See train/batch_source.h: copy k+1 overlaps step k.
class PinnedCopySource final : public BatchSource {
 public:
  PinnedCopySource(const Dataset& dataset, std::shared_ptr<const SampleOrder> order, const BatchSourceOptions& o)
      : device_(o.device),
        loader_(dataset, std::move(order), 0, pinned_loader_options(o)),
        copy_stream_(cuda::Stream::create(o.device.index, cuda::compute_priority())) {}

  Batch next() override {
    if (!pending_) pending_ = issue(loader_.next());
    InFlight ready = std::move(*pending_);
    ready.copied.block(cuda::current_stream());  // compute waits for the copy, not the host
    pending_ = issue(loader_.next());
    // The host buffers of `ready` may go once its copy is done (long done by now).
    ready.copied.synchronize();
    return ready.device_batch;
  }
  double loader_images_per_second() const override { return loader_.stats().images_per_second(); }
  int64_t bad_samples() const override { return loader_.stats().bad_samples; }

 private:
  struct InFlight {
    Batch host_batch;
    Batch device_batch;
    cuda::Event copied;
  };

  InFlight issue(Batch host) {
    InFlight f;
    cuda::StreamGuard on_copy(copy_stream_.get());
    f.device_batch = host;
    f.device_batch.images = host.images.to(device_);
    f.device_batch.labels = host.labels.to(device_);
    f.copied = cuda::Event::create();
    f.copied.record(copy_stream_.get());
    f.host_batch = std::move(host);
    return f;
  }

  Device device_;
  DataLoader loader_;
  cuda::Stream copy_stream_;
  std::optional<InFlight> pending_;
};

class GpuGeneratedSource final : public BatchSource {
 public:
  explicit GpuGeneratedSource(const BatchSourceOptions& o) : options_(o), step_(o.start_step) {}
  Batch next() override {
    Batch b;
    Shape shape{options_.batch_size};
    shape.insert(shape.end(), options_.image_shape.begin(), options_.image_shape.end());
    b.images = Tensor::empty(shape, DType::kF32, options_.device);
    b.labels = Tensor::empty({options_.batch_size}, DType::kI64, options_.device);
    const uint64_t seed = mix64(options_.seed, static_cast<uint64_t>(step_));
    cuda::fill_normal(b.images, seed, 0, 0.0, 1.0);
    cuda::fill_randint(b.labels, mix64(seed, 1), 0, options_.num_classes);
    b.step = step_++;
    return b;
  }

 private:
  BatchSourceOptions options_;
  int64_t step_;
};

#endif

}  // namespace

std::unique_ptr<BatchSource> make_batch_source(const Dataset* dataset, std::shared_ptr<const SampleOrder> order,
                                               const BatchSourceOptions& o) {
  if (o.device.is_cpu()) {
    VITDDP_CHECK(!o.generate_on_gpu, "--data gpu makes batches on the GPU: it needs a CUDA device");
    return std::make_unique<CpuSource>(*dataset, std::move(order), o);
  }
#if VITDDP_WITH_CUDA
  if (o.generate_on_gpu) return std::make_unique<GpuGeneratedSource>(o);
  return std::make_unique<PinnedCopySource>(*dataset, std::move(order), o);
#else
  throw Error("device " + o.device.str() + " needs the CUDA backend, which this build lacks");
#endif
}

}  // namespace vitddp
