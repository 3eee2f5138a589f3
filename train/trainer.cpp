#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <iomanip>
#include <ostream>

#include "data/file_dataset.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/synthetic_dataset.h"
#include "framework/core/allocator.h"
#include "framework/io/safetensors.h"
#include "framework/nn/param_arena.h"
#include "framework/ops/cross_entropy.h"
#include "framework/optim/optimizer.h"
#include "models/vit/vit.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/device.h"
#endif

namespace vitddp {
namespace {

int visible_gpus() {
#if VITDDP_WITH_CUDA
  return cuda::visible_device_count();
#else
  return 0;
#endif
}

std::string describe_visible_gpus() {
#if VITDDP_WITH_CUDA
  std::string out;
  for (const std::string& d : cuda::describe_devices()) out += (out.empty() ? "" : "; ") + d;
  return out.empty() ? "none" : out;
#else
  return "none (this build has no CUDA backend)";
#endif
}

VitConfig model_config(const TrainConfig& c, bool on_gpu) {
  std::string name = c.model == "auto" ? (on_gpu ? "vit_l_32" : "vit_tiny") : c.model;
  VitConfig m = vit_config_by_name(name);
  auto override_dim = [](int64_t flag, int64_t& field) {
    if (flag > 0) field = flag;
  };
  override_dim(c.image_size, m.image_size);
  override_dim(c.patch_size, m.patch_size);
  override_dim(c.layers, m.num_layers);
  override_dim(c.heads, m.num_heads);
  override_dim(c.hidden_dim, m.hidden_dim);
  override_dim(c.mlp_dim, m.mlp_dim);
  override_dim(c.classes, m.num_classes);
  m.dropout = c.dropout;
  m.validate();
  return m;
}

std::unique_ptr<Dataset> make_dataset(const TrainConfig& c, const VitConfig& m, int world) {
  if (c.data == "synthetic" || c.data == "learnable") {
    int64_t size = c.dataset_size > 0 ? c.dataset_size : (c.warmup + c.steps) * c.batch_size * world;
    auto kind = c.data == "synthetic" ? SyntheticKind::kRandom : SyntheticKind::kLearnable;
    return std::make_unique<SyntheticDataset>(size, m.in_channels, m.image_size, m.image_size, m.num_classes,
                                              c.seed, kind);
  }
  VITDDP_CHECK(c.data != "gpu", "--data gpu makes batches on the GPU: it needs a CUDA device");
  auto ds = std::make_unique<FileDataset>(c.data);
  Shape want{m.in_channels, m.image_size, m.image_size};
  VITDDP_CHECK(ds->image_shape() == want, c.data, ": images are ", shape_str(ds->image_shape()),
               " but the model takes ", shape_str(want));
  VITDDP_CHECK(ds->num_classes() <= m.num_classes, c.data, ": labels go up to ", ds->num_classes() - 1,
               " but the model has ", m.num_classes, " classes");
  return ds;
}

}  // namespace

ResolvedRun resolve_run(const TrainConfig& c, std::ostream& log) {
  const int visible = visible_gpus();
  std::string device = c.device;
  if (c.gpus > 0) {
    VITDDP_CHECK(c.device == "auto" || c.device.rfind("cuda", 0) == 0, "--gpus ", c.gpus,
                 " conflicts with --device ", c.device);
    VITDDP_CHECK(c.gpus <= visible, "--gpus ", c.gpus, " asked for but ", visible, " GPU(s) visible: ",
                 describe_visible_gpus());
    VITDDP_CHECK(c.gpus == 1, "--gpus ", c.gpus, ": multi-GPU training needs the DDP launcher (issue [3/7])");
    if (device == "auto") device = "cuda:0";
  }
  if (device == "auto") {
    if (visible > 0) {
      device = "cuda:0";
    } else {
      device = "cpu";
      if (c.model == "auto")
        log << "note: no GPU visible; training on the CPU with the small vit_tiny model\n";
    }
  }
  Device d = parse_device(device);
  if (d.is_cuda())
    VITDDP_CHECK(d.index < visible, "device ", d.str(), " asked for but ", visible, " GPU(s) visible: ",
                 describe_visible_gpus());
  return {d.str(), model_config(c, d.is_cuda())};
}

nlohmann::json RunResult::to_json(const TrainConfig& config) const {
  nlohmann::json j;
  j["system"] = "vitddp";
  j["device"] = device;
  j["model"] = model.name;
  j["params"] = parameters;
  j["steps"] = steps;
  j["steps_per_s"] = steps_per_s;
  j["images_per_s"] = images_per_s;
  j["peak_mem_mib"] = peak_memory_mib;
  j["losses"] = losses;
  j["last_loss"] = losses.empty() ? 0.0 : losses.back();
  j["config"] = config.to_json();
  return j;
}

RunResult run_training(const TrainConfig& config, std::ostream& out) {
  ResolvedRun run = resolve_run(config, out);
  const Device device = parse_device(run.device);
  VITDDP_CHECK(device.is_cuda() || config.precision == "fp32", "--precision ", config.precision,
               " needs a GPU; the CPU backend trains in fp32");

  VisionTransformer model(run.model, config.seed);
  NamedTensors params = model.named_parameters();
  if (!config.init_from.empty()) load_named_tensors(read_safetensors(config.init_from), params, config.init_from);
  ParamArena arena(params, device);
  std::unique_ptr<Optimizer> optimizer =
      config.optimizer == "sgd"
          ? make_sgd(arena, SgdConfig{config.lr, config.momentum, config.weight_decay})
          : make_adamw(arena, AdamWConfig{config.lr, 0.9, 0.999, 1e-8, config.weight_decay});

  std::unique_ptr<Dataset> dataset = make_dataset(config, run.model, 1);
  SamplerOptions sampler_options;
  sampler_options.dataset_size = dataset->size();
  sampler_options.seed = config.seed;
  DataLoader loader(*dataset, DistributedSampler(sampler_options), LoaderOptions{config.batch_size, config.workers, 4, false, 0, {}});

  RunResult result;
  result.device = run.device;
  result.model = run.model;
  result.parameters = arena.numel() > 0 ? run.model.parameter_count() : 0;
  out << "training " << run.model.name << " (" << result.parameters << " parameters) on " << run.device
      << ", batch " << config.batch_size << ", " << config.warmup << " warm-up + " << config.steps << " steps, "
      << optimizer->name() << " lr " << config.lr << "\n";

  Allocator& allocator = allocator_for(device);
  using Clock = std::chrono::steady_clock;
  Clock::time_point timed_start;
  const int64_t total = config.warmup + config.steps;
  for (int64_t step = 0; step < total; ++step) {
    if (step == config.warmup) {
      allocator.reset_peak(device.index);
      timed_start = Clock::now();
    }
    Clock::time_point t0 = Clock::now();
    Batch batch = loader.next();
    Tensor images = batch.images.to(device);
    Tensor labels = batch.labels.to(device);
    arena.zero_grad();
    Tensor loss = cross_entropy(model.forward(images), labels);
    loss.backward();
    optimizer->step();
    double loss_value = loss.item();
    VITDDP_CHECK(std::isfinite(loss_value), "step ", step, ": loss is ", loss_value);
    result.losses.push_back(loss_value);
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (config.print_every > 0 && (step % config.print_every == 0 || step == total - 1))
      out << "step " << std::setw(4) << step + 1 << "/" << total << (step < config.warmup ? " (warm-up)" : "")
          << "  loss " << std::fixed << std::setprecision(4) << loss_value << "  " << std::setprecision(1)
          << config.batch_size / dt << " img/s" << std::defaultfloat << "\n"
          << std::flush;
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - timed_start).count();
  result.steps = config.steps;
  result.steps_per_s = config.steps / result.seconds;
  result.images_per_s = result.steps_per_s * config.batch_size;
  result.peak_memory_mib = static_cast<double>(allocator.peak_bytes(device.index)) / (1 << 20);

  out << "summary: " << run.model.name << " on " << run.device << ": " << std::setprecision(4)
      << result.steps_per_s << " steps/s, " << result.images_per_s << " img/s, peak memory "
      << result.peak_memory_mib << " MiB, loss " << result.losses.front() << " -> " << result.losses.back() << "\n";
  if (!config.save.empty()) {
    write_safetensors(config.save, model.named_parameters());
    out << "saved weights to " << config.save << "\n";
  }
  return result;
}

}  // namespace vitddp
