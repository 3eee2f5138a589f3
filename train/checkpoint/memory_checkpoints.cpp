#include "train/checkpoint/memory_checkpoints.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <ostream>
#include <utility>

#include "train/checkpoint/run_state.h"
#include "train/run_setup.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/host_memory.h"
#endif

namespace vitddp {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// Note [Saves beside training]
// A save copies every tensor of the state into host memory of its own (pinned on a GPU, so the
// copy engines run at full rate; allocated by the first save and reused), and the step goes on
// once the copy is whole: the copy is the state after `steps_done` steps whatever training does
// next. A thread writes the copy into the folder, in the disk format, beside training. The next
// copy waits for that write first (it reuses the memory), and the chosen N leaves the write the
// time to finish, so it does not have to. A rank killed mid-write leaves a step folder without
// its records, which a restore skips for the previous whole step (two are kept).

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

MemoryCheckpoints::~MemoryCheckpoints() {
  try {
    finish();
  } catch (const std::exception& e) {
    std::cerr << "warning: a memory checkpoint's write failed: " << e.what() << "\n";
  }
}

void MemoryCheckpoints::finish() {
  if (writer_.joinable()) writer_.join();
  if (write_error_) std::rethrow_exception(std::exchange(write_error_, nullptr));
}

void MemoryCheckpoints::copy_to_host(int64_t steps_done) {
  finish();
  const auto t0 = std::chrono::steady_clock::now();
  copy_ = checkpoint_state_of(run_, steps_done);  // views of the live tensors
  double waited = seconds_since(t0);
  // Host memory, once: pinned memory is slow to allocate (seconds for gigabytes), and this is
  // no part of what a save costs later.
  size_t k = 0;
  for_each_checkpoint_tensor(copy_, [&](const std::string&, Tensor& live) {
    if (k == host_.size()) host_.emplace_back();
    Tensor& host = host_[k++];
    if (host.defined() && host.shape() == live.shape() && host.dtype() == live.dtype()) return;
#if VITDDP_WITH_CUDA
    if (live.device().is_cuda()) {
      host = Tensor::empty_with(live.shape(), live.dtype(), cuda::pinned_host_allocator());
      return;
    }
#endif
    host = Tensor::empty(live.shape(), live.dtype(), Device::cpu());
  });
  const auto t1 = std::chrono::steady_clock::now();
  k = 0;
  for_each_checkpoint_tensor(copy_, [&](const std::string&, Tensor& live) {
    Tensor& host = host_[k++];
    host.copy_(live);  // ordered after the step's work; waited for on a GPU
    live = host;
  });
  copy_seconds_ = waited + seconds_since(t1);
  ++saves_;
  last_step_ = steps_done;
}

void MemoryCheckpoints::write(const CheckpointState& state) {
  const auto t0 = std::chrono::steady_clock::now();
  CheckpointOptions options;
  options.keep = 2;
  save_checkpoint(folder_, state, options);
  write_seconds_ = seconds_since(t0);
}

int64_t MemoryCheckpoints::agreed_interval(int64_t mine) {
  int64_t most = mine;
  for (double v : value_of_every_rank(run_, static_cast<double>(mine)))
    most = std::max<int64_t>(most, static_cast<int64_t>(v));
  return most;
}

bool MemoryCheckpoints::due(int64_t step) const {
  if (!active()) return false;
  return every_ > 0 ? (step + 1) % every_ == 0 : step == first_save_;
}

void MemoryCheckpoints::save_after(int64_t step, double step_seconds) {
  copy_to_host(step + 1);
  if (every_ > 0) {
    writer_ = std::thread([this] {
      try {
        write(copy_);
      } catch (...) {
        write_error_ = std::current_exception();
      }
    });
    return;
  }
  // The first save is written at once, and timed: N follows from both of its parts.
  write(copy_);
  const double one_step = std::max(step_seconds, 1e-6);
  const auto by_copy = static_cast<int64_t>(std::ceil(copy_seconds_ / one_step / kMaxShare));
  const auto by_write = static_cast<int64_t>(std::ceil(write_seconds_ / one_step)) + 1;
  every_ = agreed_interval(std::max<int64_t>({1, by_copy, by_write}));
  // Later saves fall on multiples of N, as with a fixed N.
  out_ << std::fixed << std::setprecision(3) << "memory checkpoints: every " << every_ << " steps (a step waited "
       << copy_seconds_ << " s for its copy, written in " << write_seconds_ << " s beside training; a step takes "
       << step_seconds << " s; set memory-checkpoint-every to choose)\n";
}

nlohmann::json MemoryCheckpoints::to_json() const {
  if (!active()) return nullptr;
  return {{"folder", folder_},           {"every", every_},
          {"saves", saves_},             {"last_step", last_step_},
          {"copy_seconds", copy_seconds_}, {"write_seconds", write_seconds_}};
}

}  // namespace vitddp
