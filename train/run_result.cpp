#include "train/run_result.h"

#include <cstdlib>
#include <iomanip>
#include <sstream>

namespace vitddp {

nlohmann::json RunResult::to_json() const {
  nlohmann::json j;
  j["system"] = "vitddp";
  j["device"] = device;
  j["model"] = model.name;
  j["params"] = parameters;
  j["steps"] = steps;
  j["first_step"] = first_step;
  j["recovery"] = recovery;
  j["memory_checkpoints"] = memory_checkpoints;
  j["timed_steps"] = timed_steps;
  j["untimed_steps"] = untimed_steps;
  j["stopped_early"] = stopped_early;
  j["steps_per_s"] = steps_per_s;
  j["images_per_s"] = images_per_s;
  j["world_size"] = world_size;
  j["backend"] = backend.empty() ? nlohmann::json() : nlohmann::json(backend);
  j["buckets"] = buckets;
  j["bucket_bytes"] = bucket_bytes;
  j["skipped_steps"] = skipped_steps;
  j["grad_norm"] = grad_norm >= 0 ? nlohmann::json(grad_norm) : nlohmann::json();
  j["bad_samples"] = bad_samples;
  j["evals"] = evals;
  j["eval"] = evals.empty() ? nlohmann::json() : evals.back();
  const char* p2p = std::getenv("NCCL_P2P_DISABLE");
  j["nccl_p2p_disable"] = p2p ? p2p : "0";
  j["median_step_ms"] = median_step_ms;
  j["peak_mem_mib"] = peak_memory_mib;
  j["loader_images_per_s"] = loader_images_per_s;
  j["train_gflop_per_image"] = model.training_flops_per_image() / 1e9;
  j["achieved_tflops_per_gpu"] = achieved_tflops_per_gpu;
  j["gpu_peak_tflops"] = gpu_peak_tflops > 0 ? nlohmann::json(gpu_peak_tflops) : nlohmann::json();
  j["mfu_pct"] = mfu_pct ? nlohmann::json(*mfu_pct) : nlohmann::json();
  j["cuda_graph_replays"] = graph_replays >= 0 ? nlohmann::json(graph_replays) : nlohmann::json();
  j["precision"] = config.precision;
  if (!op_breakdown.is_null()) j["op_breakdown"] = op_breakdown;
  if (!trace.is_null() && !trace.empty()) {
    j["trace"] = trace;
    j["exposed_comm_ms"] = trace["exposed_comm_ms"];
  }
  j["losses"] = losses;
  j["last_loss"] = losses.empty() ? 0.0 : losses.back();
  j["chosen"] = nlohmann::json::array();
  for (const ChosenSetting& c : chosen) j["chosen"].push_back({{"key", c.key}, {"value", c.value}, {"why", c.reason}});
  j["config"] = config.to_json();
  return j;
}

std::string RunResult::summary_line() const {
  std::ostringstream out;
  out << "summary: " << model.name << " on " << (world_size > 1 ? std::to_string(world_size) + " ranks, rank 0 " : "")
      << device << " (" << config.precision << "): " << std::setprecision(4) << steps_per_s << " steps/s over "
      << timed_steps << " timed step(s) (after " << untimed_steps << " untimed), " << images_per_s
      << " img/s, median step " << median_step_ms << " ms, peak memory " << peak_memory_mib << " MiB, loss "
      << losses.front() << " -> " << losses.back() << ", " << achieved_tflops_per_gpu << " TFLOP/s"
      << (device.rfind("cuda", 0) == 0 ? " per GPU" : " per process");
  if (mfu_pct)
    out << " (MFU " << std::setprecision(3) << *mfu_pct << "% of " << gpu_peak_tflops
        << " TFLOP/s, the GPU's dense bf16 peak)";
  if (!trace.is_null() && trace.contains("exposed_comm_ms"))  // --trace: the totals too
    out << ", all-reduce " << trace["comm_ms"].get<double>() << " ms/step of which exposed "
        << trace["exposed_comm_ms"].get<double>() << " (overlap " << trace["overlap_pct"].get<double>() << "%)";
  return out.str();
}

}  // namespace vitddp
