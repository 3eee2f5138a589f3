#include "train/auto_settings.h"

#include <algorithm>
#include <sstream>

#include "train/dataset_factory.h"
#include "train/graphed_step.h"

namespace vitddp {

// Note [Chosen settings]
// Decision: a setting that changes no bit of the weights is the program's to choose, from the
// run's device, ranks and links, by the rows measured best there (docs/performance.md); a user
// who gives the key keeps it. Lossy settings (hook, precision, PowerSGD's bucket layout) and
// those that change rounding (the GEMM algorithms' timing) are never chosen here. A recipe is
// taken only where it was measured: two GPUs of one host (more ranks add in another order, and
// nothing was measured there), bf16 for the overlapped updates. Invariant: the facts, hence the
// choices, are the same on every rank, since they decide which collectives run.

namespace {

bool elementwise_hook(const TrainConfig& c) { return c.hook == "allreduce" || c.hook == "fp16" || c.hook == "bf16"; }

class Chooser {
 public:
  Chooser(TrainConfig* config, std::vector<ChosenSetting>* chosen) : c_(*config), chosen_(*chosen) {}

  // Sets `field` to `value` unless the user gave `key`; records the reason when it changes it
  // (unless `reason` is empty: a choice nobody needs told).
  template <typename T>
  bool set(const char* key, T& field, const T& value, const std::string& reason) {
    if (c_.is_given(key)) return false;
    if (field == value) return true;
    field = value;
    if (reason.empty()) return true;
    std::ostringstream text;
    if constexpr (std::is_same_v<T, bool>) text << (value ? "true" : "false");
    else text << value;
    chosen_.push_back({key, text.str(), reason});
    return true;
  }

 private:
  TrainConfig& c_;
  std::vector<ChosenSetting>& chosen_;
};

}  // namespace

std::vector<ChosenSetting> choose_settings(const RunFacts& f, TrainConfig* config) {
  TrainConfig& c = *config;
  std::vector<ChosenSetting> chosen;
  Chooser choose(config, &chosen);
  const bool two_gpus_one_host = f.gpu && f.world_size == 2 && f.single_host;

  // How all-reduces move. Without peer access NCCL goes through host memory with its kernels
  // spinning on the SMs beside backward; the host copy moves the same bytes with the copy engines.
  if (two_gpus_one_host && !f.peer_access && elementwise_hook(c) && !(c.is_given("update") && c.update == "sharded"))
    choose.set("transport", c.transport, std::string("host-copy"),
               f.no_peer_access_why + ": all-reduces through pinned host memory and the copy engines, no SMs taken "
               "from backward (+7% fp32, +26% bf16 on 2 H200s)");

  // Where DDP's update runs, and the bucket layout its measured recipe goes with.
  // A gradient clip needs every bucket reduced before any update: neither overlapped placement
  // keeps its gain (next-forward cannot clip at all).
  const bool overlap_ok =
      two_gpus_one_host && c.nonfinite == "stop" && c.precision == "bf16" && c.clip_grad_norm == 0;
  if (overlap_ok && !f.peer_access && elementwise_hook(c)) {
    if (choose.set("update", c.update, std::string("next-forward"),
                   f.no_peer_access_why + ": each bucket's update waits for the next forward's first use of it, so "
                   "the slow link keeps sending beside that forward")) {
      const bool host_copy = c.transport == "host-copy";
      const std::string recipe = host_copy ? "the measured P2P-off bf16 recipe with the host copy"
                                           : "the measured P2P-off bf16 recipe over NCCL";
      choose.set("ready-order-share", c.ready_order_share, host_copy ? 0.3 : 0.35, recipe);
      if (host_copy) choose.set("held-buckets", c.held_buckets, int64_t{1}, recipe);
      if (choose.set("bucket-mb", c.bucket_mb, host_copy ? 50.0 : 100.0, recipe) && host_copy)
        choose.set("first-bucket-mb", c.first_bucket_mb, 10.0, recipe);
    }
  } else if (overlap_ok && f.peer_access && c.hook == "allreduce" && c.optimizer == "sgd" && c.grad_as_bucket_view &&
             c.transport == "nccl") {
    if (choose.set("update", c.update, std::string("sharded"),
                   "2 GPUs with peer access, bf16: each rank updates its half of each bucket beside backward and the "
                   "weights are all-gathered (+1.4% on 2 H200s over NVLink)")) {
      const std::string recipe = "the measured NVLink bf16 recipe";
      if (choose.set("bucket-mb", c.bucket_mb, 100.0, recipe)) choose.set("tail-bucket-mb", c.tail_bucket_mb, 25.0, recipe);
    }
  }

  // The step as a CUDA graph, wherever it can be replayed and pays.
  if (!f.gpu) {
    choose.set("cuda-graph", c.cuda_graph, false, "");  // no GPU
  } else if (c.update == "next-forward") {
    choose.set("cuda-graph", c.cuda_graph, false, "update next-forward runs inside the next step's forward");
  } else if (c.transport == "host-copy") {
    choose.set("cuda-graph", c.cuda_graph, false, "the host copy ran slower replayed than eager");
  } else if (const std::string why = cuda_graph_unsupported(c, c.steps); !why.empty()) {
    choose.set("cuda-graph", c.cuda_graph, false, why);
  }

  // Loader threads: batches depend on the step alone, so their number only sets the pace.
  // Decoding JPEGs takes every CPU a GPU has (one core decodes a sixth of what an H200 trains
  // on); in-memory data needs a few.
  if (decodes_images(c.data)) {
    choose.set("workers", c.workers, std::clamp(f.cpus_per_rank, 1, 64),
               std::to_string(f.cpus_per_rank) + " CPU(s) per rank, each decoding images");
  } else if (c.data != "gpu") {
    const int cap = f.gpu ? 8 : 4;
    choose.set("workers", c.workers, std::clamp(f.cpus_per_rank, 1, cap),
               std::to_string(f.cpus_per_rank) + " CPU(s) per rank, at most " + std::to_string(cap));
  }

  // Untimed steps cover the graph's capture (PowerSGD's waits for its first compressed step),
  // counted from the process's first step.
  if (c.cuda_graph) {
    int64_t capture = kEagerStepsBeforeGraph;
    if (c.hook == "powersgd") capture = std::max(capture, c.powersgd_start_iter + 1);
    choose.set("untimed-steps", c.untimed_steps, std::max(c.untimed_steps, capture + 1),
               "the timing starts after the CUDA graph's capture at step " + std::to_string(capture + 1));
  }
  c.validate();
  return chosen;
}

std::string describe_choices(const std::vector<ChosenSetting>& choices) {
  std::string out;
  for (const ChosenSetting& s : choices) out += "chosen: " + s.key + " " + s.value + " (" + s.reason + ")\n";
  return out;
}

}  // namespace vitddp
