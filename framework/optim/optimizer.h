// Optimizers update every parameter of a ParamArena in one pass over its flat buffers, so the
// GPU versions are one fused launch each. State tensors are flat too and named for checkpoints.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/nn/param_arena.h"
#include "framework/optim/step_constants.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/optimizer.h"
#endif

namespace vitddp {

struct SgdConfig {
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0.0;
};

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class GradNormClip;

class Optimizer {
 public:
  explicit Optimizer(ParamArena& arena);
  virtual ~Optimizer() = default;
  // Applies one update from the arena's gradients: the clipping norm (if any) over every
  // gradient, begin_step(), then update() of every element.
  void step();
  // Note [An update in ranges]
  // One step's update may be applied range by range, each range when its gradients are ready
  // (distributed/update/next_forward.h applies a DDP bucket's range at the next forward's first
  // use of its parameters). begin_step() comes once per step, before its ranges: it advances the
  // step count, fixes the learning rate and bias corrections the ranges use, and clears the
  // non-finite report, which each range then lowers to the smallest bad element index of the
  // whole arena. update(begin, end) applies that step to arena elements [begin, end); the ranges
  // of one step must not overlap, and together they must cover every parameter before the next
  // begin_step() (the arena's alignment padding may be left out: it stays zero either way).
  // Elementwise updates make the result bit-identical to one step().
  virtual void begin_step() = 0;
  virtual void update(int64_t begin, int64_t end) = 0;
  // Elements of the arena it updates.
  int64_t size() const { return arena_.numel(); }
  virtual std::string name() const = 0;
  // State for checkpoints: flat tensors by name (the model EMA's "ema" among them), plus the
  // step count.
  NamedTensors state() const;

  // Note [Weight decay by parameter]
  // Decision: weight decay may skip parameters (timm's default skips 1-D parameters, the class
  // token and the position embedding; torchvision's decays everything). `decays` holds one flag
  // per arena parameter; the kernels read it as one bit per 16-element chunk, which is exact
  // because every parameter starts at a 16-element boundary (Note [Arena layout]) and the
  // padding between them stays zero either way.
  void set_weight_decay_mask(const std::vector<bool>& decays);
  // Global norm clipping: each update multiplies every gradient by clip->scale(), which the
  // caller computed after the all-reduce (step() does it itself). Not owned.
  void set_grad_clip(GradNormClip* clip) { clip_ = clip; }
  GradNormClip* grad_clip() const { return clip_; }
  // Model EMA: an f32 average of the master weights that every step's update refreshes in the
  // same pass, as torchvision's ExponentialMovingAverage.update_parameters() after each step:
  // the first counted step copies the weights, each later one ema = decay ema + (1 - decay) w.
  void enable_ema(double decay);
  Tensor ema() const { return ema_; }  // (numel) f32; undefined without enable_ema
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps) { step_count_ = steps; }
  // The learning rate of the next begin_step() (the schedule's, set before every step).
  void set_lr(double lr) { lr_ = lr; }
  // With a flag from NonfiniteCheck, step() does nothing when the flag is set (on the GPU the
  // kernel reads it, so the host never waits). The step count still advances on the GPU.
  void set_skip_flag(const Tensor& flag) { skip_flag_ = flag; }
  // Note [The non-finite scan in the update]
  // A step whose gradients hold a NaN or Inf must not reach weights that are used or saved.
  // Under --nonfinite skip, NonfiniteCheck reads every gradient first and the update skips on
  // its flag (set_skip_flag): one extra pass over the gradients. Under --nonfinite stop the run
  // ends at that step before saving anything, so the update may run regardless, as long as the
  // step is known to be bad: with a report flag, step() finds the smallest index of a
  // non-finite gradient element in the same pass as the update and leaves it in `flag`
  // (kNoNonfinite when there is none), at the cost of a few compares per element and no extra
  // read. The weights then hold that step's update, NaNs included; the caller must stop before
  // using them.
  void set_nonfinite_report(const Tensor& flag) { report_flag_ = flag; }
  double lr() const { return lr_; }

 protected:
  // The optimizer's own state tensors, by name (state() adds the EMA's).
  virtual NamedTensors own_state() const = 0;
  // Fixes this step's constants for its ranges (the EMA's added here): on a GPU, written to the
  // device buffer the kernels read (framework/optim/step_constants.h).
  void publish(StepConstants constants);
  const StepConstants& constants() const { return constants_; }
  // CPU: the gradient scale of clipping (1 without), and whether decay applies at arena index i.
  float host_grad_scale() const;
  bool host_decays(int64_t index) const;
  // CPU: the EMA's update of elements [begin, end) from the updated master weights.
  void update_ema_on_host(int64_t begin, int64_t end);
#if VITDDP_WITH_CUDA
  // The arena's buffers [begin, end) and everything the kernels read besides their state.
  cuda::FlatBuffers device_buffers(int64_t begin, int64_t end) const;
#endif
  // CPU: whether the flag says to skip (reads it; the CPU has nothing to wait for).
  bool skip_on_host() const;
  // What every begin_step() starts with: on the CPU a skipped step does not count (on the GPU
  // the kernel skips, and it counts); else the step count advances and the non-finite report
  // is cleared. Returns false when the step is skipped.
  bool begin_counted_step();
  // Checks an update range against the arena's size; false when this step is skipped.
  bool update_runs(int64_t begin, int64_t end) const;
  // CPU: lowers the report flag (if any) to the first non-finite gradient in [begin, end) of
  // `grads`, an arena index. The scan is a pass of its own, before the update: the same answer.
  void report_nonfinite_on_host(const float* grads, int64_t begin, int64_t end) const;
  const int64_t* device_skip_flag() const { return skip_flag_.defined() ? skip_flag_.data<int64_t>() : nullptr; }
  int64_t* report_flag() const { return report_flag_.defined() ? report_flag_.data<int64_t>() : nullptr; }

  ParamArena& arena_;
  int64_t step_count_ = 0;
  double lr_ = 0;
  Tensor skip_flag_;
  Tensor report_flag_;  // see set_nonfinite_report
  bool skipped_ = false;  // this step, on the CPU (begin_counted_step)

 private:
  GradNormClip* clip_ = nullptr;
  double ema_decay_ = 0;
  Tensor ema_;            // (numel) f32, with enable_ema
  Tensor decay_mask_;     // (words) i64 on the arena's device; undefined: decay everywhere
  StepConstants constants_;
  Tensor device_constants_;  // GPU: the StepConstants the kernels read
};

// PyTorch's SGD (dampening 0, no Nesterov): g += wd * p; buf = momentum * buf + g; p -= lr * buf.
std::unique_ptr<Optimizer> make_sgd(ParamArena& arena, const SgdConfig& config);
// PyTorch's AdamW (decoupled weight decay, bias-corrected moments).
std::unique_ptr<Optimizer> make_adamw(ParamArena& arena, const AdamWConfig& config);

}  // namespace vitddp
