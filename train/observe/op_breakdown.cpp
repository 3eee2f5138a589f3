#include "train/observe/op_breakdown.h"

#include <chrono>
#include <iomanip>
#include <vector>

#if VITDDP_WITH_CUDA
#include "framework/cuda/check.h"
#include "framework/cuda/op_profiler.h"
#endif

namespace vitddp {

nlohmann::json op_breakdown(const std::function<Tensor()>& step, const std::function<void()>& after_step,
                            const ProcessGroup* group, std::ostream& out) {
  nlohmann::json rows = nlohmann::json::array();
#if VITDDP_WITH_CUDA
  // First a plain step from an idle GPU: how long the host takes to issue one step's work
  // against when the GPU finishes it. Issuing well within the step means the GPU is the limit
  // (the host runs ahead and launch gaps hide); close to it, the host may be (or it waited for
  // a full launch queue).
  CUDA_CHECK(cudaDeviceSynchronize());
  const ProcessGroup::IssueStats before = group ? group->issue_stats() : ProcessGroup::IssueStats{};
  const auto start = std::chrono::steady_clock::now();
  Tensor loss = step();
  const double issued_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  loss.item();
  after_step();
  const double finished_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out << "host against GPU: one step issued in " << std::setprecision(4) << issued_ms << " ms, finished "
      << finished_ms << " ms after the start (issue/finish " << std::setprecision(2) << issued_ms / finished_ms
      << ")\n";
  if (group) {  // how much of the issue time went to handing collectives to the backend
    const ProcessGroup::IssueStats after = group->issue_stats();
    const int64_t n = after.collectives - before.collectives;
    const double ms = 1e3 * (after.seconds - before.seconds);
    if (n > 0)
      out << "  of which issuing " << n << " collective(s) (" << group->backend() << "): " << std::setprecision(4) << ms
          << " ms, " << std::setprecision(3) << 1e3 * ms / n << " us each\n";
  }
  cuda::OpProfiler& profiler = cuda::OpProfiler::instance();
  profiler.set_enabled(true);
  step().item();
  profiler.set_enabled(false);
  after_step();
  std::vector<cuda::OpProfiler::Entry> entries = profiler.collect();
  double total = 0;
  for (const auto& e : entries) total += e.ms;
  out << "op breakdown of one step (GPU time per op type, CUDA events; " << std::setprecision(4) << total
      << " ms in ops):\n";
  for (const auto& e : entries) {
    out << "  " << std::left << std::setw(44) << e.name << std::right << std::setw(9) << std::fixed
        << std::setprecision(3) << e.ms << " ms " << std::setw(6) << e.calls << " calls " << std::setw(6)
        << std::setprecision(1) << 100.0 * e.ms / total << "%\n"
        << std::defaultfloat;
    rows.push_back({{"op", e.name}, {"ms", e.ms}, {"calls", e.calls}});
  }
#else
  (void)step;
  (void)after_step;
  (void)group;
  (void)out;
#endif
  return rows;
}

}  // namespace vitddp
