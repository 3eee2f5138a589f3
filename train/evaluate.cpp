#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <vector>

#include "data/loader.h"
#include "framework/autograd/grad_mode.h"
#include "framework/ops/cast.h"
#include "train/run_setup.h"

namespace vitddp {
namespace {

// The host's sums over one batch of logits (B, C): loss (double), top-1 and top-5 hits.
struct Sums {
  double loss = 0;
  int64_t correct1 = 0, correct5 = 0, samples = 0;
};

void add_batch(const Tensor& logits_f32, const Tensor& labels, Sums& s) {
  const Tensor l = logits_f32.to(Device::cpu()).contiguous();
  const Tensor y = labels.to(Device::cpu()).contiguous();
  const int64_t B = l.size(0), C = l.size(1);
  const float* x = l.data<float>();
  const int64_t* lab = y.data<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    const float* row = x + r * C;
    double m = -INFINITY;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, static_cast<double>(row[c]));
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(static_cast<double>(row[c]) - m);
    s.loss += m + std::log(sum) - row[lab[r]];
    // The label's rank: classes scoring above it (ties count against it, as a strict top-k would).
    int64_t above = 0;
    for (int64_t c = 0; c < C; ++c)
      if (c != lab[r] && (row[c] > row[lab[r]] || (row[c] == row[lab[r]] && c < lab[r]))) ++above;
    s.correct1 += above < 1;
    s.correct5 += above < 5;
  }
  s.samples += B;
}

}  // namespace

nlohmann::json EvalResult::to_json() const {
  return {{"after_step", after_step}, {"samples", samples}, {"correct1", correct1}, {"correct5", correct5},
          {"loss", loss},             {"top1", top1()},     {"top5", top5()},         {"on_ema", on_ema},
          {"train_seconds", train_seconds}};
}

std::string EvalResult::summary() const {
  std::ostringstream s;
  s << "eval after step " << after_step << ": loss " << std::fixed << std::setprecision(4) << loss << ", top-1 "
    << std::setprecision(2) << 100 * top1() << "%, top-5 " << 100 * top5() << "% (" << samples << " images"
    << (on_ema ? ", the weights' EMA" : "") << ")";
  return s.str();
}

Evaluator::Evaluator(TrainingRun& run)
    : run_(run), data_(make_eval_data(run.config, run.model_config, run.env.rank, run.world, run.classes)) {}

Evaluator::~Evaluator() = default;

EvalResult Evaluator::evaluate(int64_t steps_done) {
  const TrainConfig& c = run_.config;
  if (run_.ddp) {  // pending updates applied; with an EMA, every rank's whole (sharded updates)
    run_.ddp->flush();
    if (run_.optimizer->ema().defined()) run_.ddp->gather_state();
  }
  // On the EMA: its values in the weights the forward reads, the weights back afterwards.
  const Tensor ema = run_.optimizer->ema();
  Tensor saved;
  if (ema.defined()) {
    saved = run_.arena->flat_params().clone();
    run_.arena->flat_params().copy_(ema);
  }
  const bool was_training = run_.model->is_training();
  run_.model->set_training(false);
  Sums sums;
  try {
    NoGradGuard no_grad;
    LoaderOptions lo;
    lo.batch_size = c.batch_size;
    lo.num_workers = c.workers;
    lo.max_bad_samples = bad_sample_allowance(c, *data_.dataset);
    lo.on_bad_sample = warn_of_bad_sample;
    DataLoader loader(*data_.dataset, data_.order, 0, lo);
    for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
      Batch batch = loader.next();
      const Tensor logits = run_.model->forward(batch.images.to(run_.device).to(run_.compute_dtype));
      add_batch(cast(logits, DType::kF32), batch.labels, sums);
    }
  } catch (...) {
    run_.model->set_training(was_training);
    if (saved.defined()) run_.arena->flat_params().copy_(saved);
    throw;
  }
  run_.model->set_training(was_training);
  if (saved.defined()) run_.arena->flat_params().copy_(saved);
  // Every rank's sums: exact in f64 (counts below 2^53).
  std::vector<double> mine{sums.loss, static_cast<double>(sums.correct1), static_cast<double>(sums.correct5),
                           static_cast<double>(sums.samples)};
  if (run_.ddp) {
    const Device on = run_.device.is_cuda() ? run_.device : Device::cpu();
    Tensor t = Tensor::from_vector(mine, {4}, DType::kF64).to(on);
    run_.ddp->group().allreduce(t, ReduceOp::kSum)->wait();
    mine = t.to(Device::cpu()).to_vector();
  }
  EvalResult r;
  r.after_step = steps_done;
  r.samples = static_cast<int64_t>(mine[3]);
  r.correct1 = static_cast<int64_t>(mine[1]);
  r.correct5 = static_cast<int64_t>(mine[2]);
  r.loss = r.samples ? mine[0] / r.samples : 0.0;
  r.on_ema = ema.defined();
  return r;
}

}  // namespace vitddp
