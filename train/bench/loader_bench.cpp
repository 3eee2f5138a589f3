#include "train/bench/loader_bench.h"

#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <vector>

#include "data/loader.h"
#include "data/sampler.h"
#include "distributed/launcher.h"
#include "framework/core/error.h"
#include "train/dataset_factory.h"
#include "train/exit_codes.h"
#include "train/run_setup.h"

namespace vitddp::bench {

nlohmann::json LoaderBenchResult::to_json() const {
  nlohmann::json j;
  j["system"] = "vitddp";
  j["bench"] = "loader";
  j["model"] = model;
  j["data"] = data;
  j["image_shape"] = {channels, image_size, image_size};
  j["batch_size"] = batch_size;
  j["workers"] = workers;
  j["batches"] = batches;
  j["images"] = images;
  j["untimed_batches"] = untimed_batches;
  j["seconds"] = seconds;
  j["wait_seconds"] = wait_seconds;
  j["images_per_s"] = images_per_second();
  j["batches_per_s"] = batches_per_second();
  return j;
}

std::string LoaderBenchResult::summary() const {
  std::ostringstream s;
  s << "loader alone: " << model << " images " << channels << "x" << image_size << "x" << image_size << ", batch "
    << batch_size << ", " << workers << (workers == 1 ? " worker" : " workers") << ", data " << data << ": "
    << std::fixed << std::setprecision(1) << images_per_second() << " images/s, " << std::setprecision(2)
    << batches_per_second() << " batches/s (" << batches << (batches == 1 ? " batch" : " batches") << " of "
    << images << " images after " << untimed_batches << " untimed)";
  return s.str();
}

namespace {
// A next() that took this long waited for a worker: nothing was built ahead.
constexpr double kWaitedSeconds = 2e-4;
}  // namespace

LoaderBenchResult bench_loader(const TrainConfig& config, const VitConfig& model) {
  DataSource data = make_train_data(config, model, 0, 1);
  LoaderOptions loader_options;
  loader_options.batch_size = config.batch_size;
  loader_options.num_workers = config.workers;
  loader_options.seed = config.seed;
  loader_options.max_bad_samples = bad_sample_allowance(config, *data.dataset);
  loader_options.on_bad_sample = warn_of_bad_sample;
  DataLoader loader(*data.dataset, data.order, 0, loader_options);

  LoaderBenchResult r;
  r.model = model.name;
  r.data = config.data;
  r.channels = model.in_channels;
  r.image_size = model.image_size;
  r.batch_size = config.batch_size;
  r.workers = config.workers;
  // --steps batches are timed after the untimed ones, which fill the pipeline and then drain
  // the batches built ahead: timing starts once a next() had to wait for its batch, so the
  // workers' head start does not count as their pace (without workers there is none).
  r.untimed_batches = 0;
  const int64_t most_untimed = config.untimed_steps + 4 * std::max(8, 2 * config.workers);
  for (bool waited = config.workers == 0; r.untimed_batches < config.untimed_steps || (!waited && r.untimed_batches < most_untimed);
       ++r.untimed_batches) {
    const double wait_before = loader.stats().wait_seconds;
    loader.next();
    waited = waited || loader.stats().wait_seconds - wait_before > kWaitedSeconds;
  }
  const LoaderStats before = loader.stats();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < config.steps; ++i) loader.next();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const LoaderStats after = loader.stats();
  r.batches = after.batches - before.batches;
  r.images = after.images - before.images;
  r.wait_seconds = after.wait_seconds - before.wait_seconds;
  return r;
}

int run_bench_loader(int argc, char** argv) {
  // The training flags are those after "train bench loader".
  std::vector<char*> args{argv[0]};
  for (int i = 3; i < argc; ++i) args.push_back(argv[i]);
  TrainConfig config;
  if (!parse_train_config(static_cast<int>(args.size()), args.data(), &config)) return kExitOk;
  VITDDP_CHECK(config.gpus == 0 && config.procs == 0,
               "train bench loader measures one process's loader: --gpus and --procs do not apply "
               "(each rank of a run has a loader of its own)");
  VITDDP_CHECK(config.data != "gpu", "train bench loader: --data gpu makes the batches on the GPU, so there is "
                                     "no loader to measure; name an image folder, tar shards, a .safetensors file, synthetic or "
                                     "learnable");
  VITDDP_CHECK(config.accumulate == 1 && !config.resume && config.checkpoint_dir.empty() && config.save.empty() &&
                   !config.op_breakdown && config.trace.empty(),
               "train bench loader times the loader alone: --accumulate, --resume, --checkpoint-dir, --save, "
               "--op-breakdown and --trace act on training (with --accumulate K a step takes K batches)");
  std::ostringstream notes;  // resolve_run's note on the model it picks speaks of training
  const ResolvedRun run = resolve_run(config, read_rank_environment(), notes);
  const LoaderBenchResult result = bench_loader(config, run.model);
  std::cout << (config.json ? result.to_json().dump() : result.summary()) << std::endl;
  return kExitOk;
}

}  // namespace vitddp::bench
