#include <algorithm>

#include "framework/core/error.h"
#include "framework/optim/grad_clip.h"
#include "framework/optim/nonfinite.h"
#include "framework/optim/optimizer.h"

namespace vitddp {

Optimizer::Optimizer(ParamArena& arena) : arena_(arena) {
  if (arena.device().is_cuda()) {
#if VITDDP_WITH_CUDA
    constexpr int64_t kFloats = (sizeof(StepConstants) + sizeof(float) - 1) / sizeof(float);
    device_constants_ = Tensor::zeros({kFloats}, DType::kF32, arena.device());
#endif
  }
}

void Optimizer::step() {
  if (clip_) clip_->measure_all();
  begin_step();
  update(0, size());
}

NamedTensors Optimizer::state() const {
  NamedTensors all = own_state();
  if (ema_.defined()) all.emplace_back("ema", ema_);
  return all;
}

void Optimizer::set_weight_decay_mask(const std::vector<bool>& decays) {
  VITDDP_CHECK(decays.size() == arena_.size(), name(), ": weight decay mask of ", decays.size(),
               " flags for an arena of ", arena_.size(), " parameters");
  const int64_t chunks = (arena_.numel() + 15) / 16;
  std::vector<int64_t> words((chunks + 63) / 64, 0);
  for (size_t k = 0; k < decays.size(); ++k) {
    if (!decays[k]) continue;
    const int64_t begin = arena_.offset_of(k);
    VITDDP_ASSERT(begin % 16 == 0, "parameter ", arena_.named_params()[k].first, " starts off a 16-element boundary");
    const int64_t end = begin + arena_.named_params()[k].second.numel();
    for (int64_t c = begin / 16; c < (end + 15) / 16; ++c)
      words[c / 64] |= static_cast<int64_t>(uint64_t{1} << (c % 64));
  }
  decay_mask_ = Tensor::from_vector_i64(words, {static_cast<int64_t>(words.size())}).to(arena_.device());
}

void Optimizer::enable_ema(double decay) {
  VITDDP_CHECK(decay > 0 && decay < 1, name(), ": EMA decay must be in (0, 1), got ", decay);
  ema_decay_ = decay;
  ema_ = arena_.flat_master().clone();  // as torchvision: the average starts as a copy of the model
}

void Optimizer::publish(StepConstants c) {
  if (ema_.defined()) {  // torchvision's first update_parameters() copies the weights
    const bool first = step_count_ <= 1;
    c.ema_keep = first ? 0.0f : static_cast<float>(ema_decay_);
    c.ema_take = first ? 1.0f : static_cast<float>(1.0 - ema_decay_);
  }
  constants_ = c;
  if (device_constants_.defined()) {
#if VITDDP_WITH_CUDA
    cuda::write_step_constants(reinterpret_cast<StepConstants*>(device_constants_.data<float>()), c);
#endif
  }
}

float Optimizer::host_grad_scale() const { return clip_ ? clip_->scale().data<float>()[0] : 1.0f; }

bool Optimizer::host_decays(int64_t index) const {
  if (!decay_mask_.defined()) return true;
  const int64_t chunk = index / 16;
  return (static_cast<uint64_t>(decay_mask_.data<int64_t>()[chunk / 64]) >> (chunk % 64)) & 1;
}

void Optimizer::update_ema_on_host(int64_t begin, int64_t end) {
  if (!ema_.defined()) return;
  float* e = ema_.data<float>();
  const float* w = arena_.flat_master().data<float>();
  const float keep = constants_.ema_keep, take = constants_.ema_take;
  for (int64_t i = begin; i < end; ++i) {
    const float kept = keep * e[i];  // two roundings, as torch's decay * avg + (1 - decay) * param
    const float taken = take * w[i];
    e[i] = kept + taken;
  }
}

#if VITDDP_WITH_CUDA
cuda::FlatBuffers Optimizer::device_buffers(int64_t begin, int64_t end) const {
  cuda::FlatBuffers b;
  b.master = arena_.flat_master().data<float>() + begin;
  b.grads = static_cast<const char*>(arena_.flat_grads().data_ptr()) + begin * dtype_size(arena_.flat_grads().dtype());
  b.grad_dtype = arena_.flat_grads().dtype();
  if (arena_.mixed_precision()) {
    b.params16 = static_cast<char*>(arena_.flat_params().data_ptr()) + begin * dtype_size(arena_.flat_params().dtype());
    b.params16_dtype = arena_.flat_params().dtype();
  }
  b.n = end - begin;
  b.index_base = begin;
  b.skip_if_set = device_skip_flag();
  b.report_nonfinite = report_flag();
  b.constants = reinterpret_cast<const StepConstants*>(device_constants_.data<float>());
  b.grad_scale = clip_ ? clip_->scale().data<float>() : nullptr;
  b.decay_mask = decay_mask_.defined() ? decay_mask_.data<int64_t>() : nullptr;
  b.ema = ema_.defined() ? ema_.data<float>() + begin : nullptr;
  return b;
}
#endif

bool Optimizer::skip_on_host() const {
  return skip_flag_.defined() && skip_flag_.device().is_cpu() && skip_flag_.data<int64_t>()[0] != kNoNonfinite;
}

bool Optimizer::begin_counted_step() {
  skipped_ = skip_on_host();
  if (skipped_) return false;
  ++step_count_;
  if (int64_t* report = report_flag()) {
    if (report_flag_.device().is_cuda()) {
#if VITDDP_WITH_CUDA
      cuda::reset_nonfinite_report(report);
#endif
    } else {
      *report = kNoNonfinite;
    }
  }
  return true;
}

void Optimizer::report_nonfinite_on_host(const float* grads, int64_t begin, int64_t end) const {
  int64_t* report = report_flag();
  if (!report) return;
  const int64_t found = first_nonfinite_index(grads + begin, end - begin);
  if (found != kNoNonfinite) *report = std::min(*report, begin + found);
}

bool Optimizer::update_runs(int64_t begin, int64_t end) const {
  VITDDP_ASSERT(0 <= begin && begin <= end && end <= size(), name(), ": update range outside the arena");
  if (skipped_) return false;
  VITDDP_ASSERT(step_count_ > 0, name(), ": update() before the first begin_step()");
  return true;
}

}  // namespace vitddp
