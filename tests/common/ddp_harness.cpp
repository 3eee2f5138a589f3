#include "common/ddp_harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "common/multiprocess.h"
#include "common/test_utils.h"
#include "framework/io/safetensors.h"
#include "framework/nn/param_arena.h"
#include "framework/ops/cross_entropy.h"
#include "framework/ops/elementwise.h"
#include "framework/optim/optimizer.h"
#include "distributed/ddp.h"
#include "models/vit/vit.h"
#include "train/run_setup.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/stream.h"
#endif

namespace vitddp::testing {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kPerRank = 2;

struct GlobalBatch {
  Tensor images, labels;
};

// The same global batch of world * kPerRank samples for every process, per step.
// `samples` = world * accumulate * kPerRank rows; rank r's micro-batch m is the slice starting at
// row (r * accumulate + m) * kPerRank.
GlobalBatch global_batch(int step, int64_t samples) {
  Generator gen(1000 + step);
  GlobalBatch b;
  b.images = random_tensor({samples, 3, 32, 32}, gen, DType::kF32);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < samples; ++i) labels.push_back(static_cast<int64_t>(gen.next_u64() % 10));
  b.labels = Tensor::from_vector_i64(labels, {samples});
  return b;
}

std::unique_ptr<VisionTransformer> make_model() {
  auto model = std::make_unique<VisionTransformer>(vit_config_by_name("vit_tiny"), 17);
  Generator gen(18);
  for (auto& [name, p] : model->named_parameters()) fill_uniform(p, gen, -0.2, 0.2);  // every gradient non-zero
  return model;
}

// Single process, whole batch: the reference weights after kSteps.
std::vector<double> reference(int64_t samples) {
  auto model = make_model();
  NamedTensors params = model->named_parameters();
  ParamArena arena(params, Device::cpu());
  auto sgd = make_sgd(arena, SgdConfig{0.1, 0.9, 0.0});
  for (int step = 0; step < kSteps; ++step) {
    GlobalBatch b = global_batch(step, samples);
    arena.zero_grad();
    cross_entropy(model->forward(b.images), b.labels).backward();
    sgd->step();
  }
  return arena.flat_master().to_vector();
}

// One rank: trains on its slice with DDP and writes its weights after every step.
int run_rank(int rank, int world, const std::string& folder, const TrainConfig& config, DeviceType type) {
  Device device = type == DeviceType::kCUDA ? Device::cuda(rank) : Device::cpu();
#if VITDDP_WITH_CUDA
  if (device.is_cuda()) cuda::set_device(rank);
#endif
  RankEnvironment env;
  env.distributed = true;
  env.rank = env.local_rank = rank;
  env.world_size = world;
  env.rendezvous = folder + "/rendezvous";
  auto model = make_model();
  NamedTensors params = model->named_parameters();
  ParamArena arena(params, device);
  auto sgd = make_sgd(arena, SgdConfig{0.1, 0.9, 0.0});
  DistributedDataParallel ddp(arena, *model, *sgd, Tensor(), ddp_options(config, env));
  const int64_t k = config.accumulate;
  for (int step = 0; step < kSteps; ++step) {
    GlobalBatch b = global_batch(step, world * k * kPerRank);
    arena.zero_grad();
    // As the trainer: K micro-batches, the loss scaled by 1/K, only the last one communicates.
    for (int64_t micro = 0; micro < k; ++micro) {
      const bool sync = micro + 1 == k;
      const int64_t row = (rank * k + micro) * kPerRank;
      Tensor images = b.images.as_strided({kPerRank, 3, 32, 32}, b.images.strides(), row * 3 * 32 * 32);
      Tensor labels = b.labels.as_strided({kPerRank}, {1}, row);
      if (sync) ddp.begin_step();
      Tensor loss = cross_entropy(model->forward(images.contiguous().to(device)), labels.contiguous().to(device));
      ddp.begin_backward(micro, sync);
      scale(loss, 1.0 / static_cast<double>(k)).backward();
      ddp.end_backward(sync);
    }
    ddp.step();
    write_safetensors(folder + "/rank" + std::to_string(rank) + "_step" + std::to_string(step) + ".safetensors",
                      {{"w", arena.flat_master().to(Device::cpu())}});
  }
  return 0;
}

std::vector<double> weights_of(const std::string& folder, int rank, int step) {
  SafetensorsFile f = read_safetensors(folder + "/rank" + std::to_string(rank) + "_step" + std::to_string(step) +
                                       ".safetensors");
  return f.tensors.at(0).second.to_vector();
}

double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

void check_ddp_equivalence(int world, DeviceType device_type, const TrainConfig& config, double tolerance,
                           const std::string& what) {
  SCOPED_TRACE(what);
  TempFolder folder("vitddp_ddp");
  std::vector<int> codes = run_in_processes(
      world, [&](int rank) { return run_rank(rank, world, folder.path(), config, device_type); },
      std::chrono::seconds(180));
  for (int c : codes) ASSERT_EQ(c, 0) << describe_exit_codes(codes);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<double> rank0 = weights_of(folder.path(), 0, step);
    for (int r = 1; r < world; ++r)
      ASSERT_EQ(weights_of(folder.path(), r, step), rank0) << "rank " << r << " differs from rank 0 after step " << step;
  }
  if (tolerance < 0) return;  // an approximation (PowerSGD): ranks must agree, no reference
  double e = relative_error(weights_of(folder.path(), 0, kSteps - 1), reference(world * config.accumulate * kPerRank));
  EXPECT_LE(e, tolerance) << "relative error against one process on the whole batch";
}


void check_bucket_layouts_and_hooks(int world, DeviceType device_type) {
  for (bool view : {true, false}) {
    for (double mb : {0.02, 100.0}) {  // many small buckets / one bucket
      TrainConfig config;
      config.bucket_mb = mb;
      config.first_bucket_mb = mb / 4;
      config.grad_as_bucket_view = view;
      config.static_graph = mb > 1;
      check_ddp_equivalence(world, device_type, config, 1e-5,
                            "view " + std::to_string(view) + ", bucket " + std::to_string(mb) + " MB");
    }
  }
  for (const char* hook : {"fp16", "bf16"}) {
    TrainConfig config;
    config.bucket_mb = 0.05;
    config.hook = hook;
    check_ddp_equivalence(world, device_type, config, std::string(hook) == "fp16" ? 2e-3 : 1e-2, hook);
  }
}

int gpus_without_cuda_init() {
  FILE* pipe = popen("nvidia-smi -L 2>/dev/null", "r");
  if (!pipe) return 0;
  int count = 0;
  char line[512];
  while (fgets(line, sizeof line, pipe))
    if (std::string(line).rfind("GPU ", 0) == 0) ++count;
  pclose(pipe);
  return count;
}

}  // namespace vitddp::testing
