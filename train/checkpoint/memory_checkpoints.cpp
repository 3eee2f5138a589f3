#include "train/checkpoint/memory_checkpoints.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <ostream>

#include "train/checkpoint/run_state.h"
#include "train/run_setup.h"

namespace vitddp {

MemoryCheckpoints::MemoryCheckpoints(TrainingRun& run, std::ostream& out)
    : run_(run), out_(out), folder_(memory_checkpoint_folder()) {
  if (!active()) return;
  every_ = run.config.memory_checkpoint_every;
  // The first timed step is the first whose time says what a step costs.
  first_save_ = std::max<int64_t>(run.start_step, run.start_step + run.config.untimed_steps);
  out_ << "memory checkpoints: in " << folder_ << " (this node's launcher keeps them), "
       << (every_ > 0 ? "every " + std::to_string(every_) + " steps (memory-checkpoint-every)"
                      : "every N steps, N chosen after step " + std::to_string(first_save_ + 1) +
                            " so that they cost at most 2% of the time")
       << "\n";
}

void MemoryCheckpoints::save(int64_t steps_done) {
  const auto t0 = std::chrono::steady_clock::now();
  save_run(run_, steps_done, folder_, /*keep=*/2);
  last_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++saves_;
  last_step_ = steps_done;
}

int64_t MemoryCheckpoints::agreed_interval(int64_t mine) {
  if (!run_.ddp) return mine;
  const Device on = run_.device.is_cuda() ? run_.device : Device::cpu();
  Tensor all = Tensor::empty({run_.world, 1}, DType::kF64, on);
  run_.ddp->group().allgather(Tensor::from_vector({static_cast<double>(mine)}, {1}, DType::kF64).to(on), all)->wait();
  int64_t most = mine;
  for (double v : all.to_vector()) most = std::max<int64_t>(most, static_cast<int64_t>(v));
  return most;
}

bool MemoryCheckpoints::due(int64_t step) const {
  if (!active()) return false;
  return every_ > 0 ? (step + 1) % every_ == 0 : step == first_save_;
}

void MemoryCheckpoints::save_after(int64_t step, double step_seconds) {
  const bool choosing = every_ == 0;
  save(step + 1);
  if (!choosing) return;
  const double ratio = last_seconds_ / std::max(step_seconds, 1e-6);
  every_ = agreed_interval(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(ratio / kMaxShare))));
  // Later saves fall on multiples of N, as with a fixed N.
  out_ << std::fixed << std::setprecision(3) << "memory checkpoints: every " << every_ << " steps (a save took "
       << last_seconds_ << " s, a step " << step_seconds << " s; set memory-checkpoint-every to choose)\n";
}

nlohmann::json MemoryCheckpoints::to_json() const {
  if (!active()) return nullptr;
  return {{"folder", folder_}, {"every", every_}, {"saves", saves_}, {"last_step", last_step_},
          {"save_seconds", last_seconds_}};
}

}  // namespace vitddp
