// Our flags -> the PyTorch reference script's flags. See train/bench/reference.h.
#include "train/bench/reference.h"

#include <algorithm>
#include <set>

#include "framework/core/error.h"
#include "train/config.h"

namespace vitddp::bench {
namespace {

std::string text_of(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

ReferenceCommand none(const std::string& why) {
  ReferenceCommand c;
  c.no_counterpart = why;
  return c;
}

}  // namespace

ReferenceCommand reference_command(const SweepRun& run, const nlohmann::json& train_defaults,
                                   const std::string& script, const std::string& python) {
  VITDDP_ASSERT(train_defaults.is_object(), "reference_command needs TrainConfig().to_json()");
  nlohmann::json c = train_defaults;  // the run's effective settings
  for (const auto& [name, value] : run.flags) c[name] = value;
  auto changed = [&](const std::string& name) { return c.contains(name) && c[name] != train_defaults.value(name, nlohmann::json()); };

  // Flags the script has, handled below; flags that do not change what is measured.
  static const std::set<std::string> mapped = {"model",     "batch-size", "image-size", "untimed-steps", "steps",
                                               "workers",   "data",       "precision",  "optimizer", "gpus",
                                               "ddp",       "bucket-mb",  "static-graph", "grad-as-bucket-view",
                                               "hook",      "powersgd-rank", "device",  "procs"};
  static const std::set<std::string> ignored = {"lr",   "seed", "print-every", "json", "timeout", "nonfinite",
                                                "save", "op-breakdown", "profile-steps", "gemm-autotune",
                                                "gemm-cache-dir", "concurrent-wgrad", "checkpoint-keep"};
  if (changed("procs")) return none("--procs: the reference trains on GPUs only");
  const std::string device = text_of(c["device"]);
  if (device == "cpu") return none("--device cpu: the reference trains on GPUs only");
  for (const auto& [name, value] : c.items())
    if (!mapped.count(name) && !ignored.count(name) && changed(name))
      return none((is_public_flag(name) ? "--" : "") + name + " " + text_of(value) +
                  " has no counterpart in the reference script");

  std::string model = text_of(c["model"]);
  if (model == "auto") model = "vit_l_32";  // what `train` picks on a GPU
  if (model != "vit_l_32" && model != "vit_b_16" && model != "vit_b_32")
    return none("--model " + model + ": the reference has vit_b_16, vit_b_32 and vit_l_32");
  const std::string data = text_of(c["data"]);
  if (data != "synthetic" && data != "gpu")
    return none("--data " + data + ": the reference has random images only (synthetic, gpu)");

  ReferenceCommand out;
  out.gpus = std::max<int>(1, c["gpus"].get<int>());
  const bool ddp = out.gpus > 1 || c["ddp"].get<bool>();
  out.argv.push_back(python);
  if (ddp) {
    // torchrun provides the rank environment (and the rendezvous DDP needs even for one GPU).
    for (const char* a : {"-m", "torch.distributed.run", "--standalone"}) out.argv.push_back(a);
    out.argv.push_back("--nproc_per_node=" + std::to_string(out.gpus));
  }
  out.argv.push_back(script);
  auto add = [&](const std::string& flag, const std::string& value) {
    out.argv.push_back(flag);
    out.argv.push_back(value);
  };
  add("--model", model);
  add("--batch-size", text_of(c["batch-size"]));
  if (c["image-size"].get<int64_t>() > 0) add("--img", text_of(c["image-size"]));
  // The script's --steps are its timed steps, after --warmup untimed ones; ours count them all.
  const int64_t untimed = std::min(c["untimed-steps"].get<int64_t>(), c["steps"].get<int64_t>() - 1);
  add("--warmup", std::to_string(untimed));
  add("--steps", std::to_string(c["steps"].get<int64_t>() - untimed));
  add("--workers", text_of(c["workers"]));
  if (data == "gpu") out.argv.push_back("--gpu-data");
  add("--precision", text_of(c["precision"]));
  add("--optimizer", text_of(c["optimizer"]));
  if (ddp) {
    out.argv.push_back("--ddp");
    add("--bucket-mb", text_of(c["bucket-mb"]));
    if (c["static-graph"].get<bool>()) out.argv.push_back("--static-graph");
  }
  // Also without DDP: the script then zeroes gradients in place rather than freeing them, as
  // our arena always does.
  if (c["grad-as-bucket-view"].get<bool>()) out.argv.push_back("--grad-as-bucket-view");
  if (ddp) {
    const std::string hook = text_of(c["hook"]);
    add("--hook", hook == "allreduce" ? "none" : hook);
    if (hook == "powersgd") add("--powersgd-rank", text_of(c["powersgd-rank"]));
  }
  add("--tag", run.label);
  return out;
}

}  // namespace vitddp::bench
