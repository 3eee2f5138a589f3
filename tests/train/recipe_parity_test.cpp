// The training recipe's pieces against PyTorch and torchvision (tests/python/recipe_parity.py,
// under the python3 the parity tests found at configure time; without one they skip): label
// smoothing and soft targets, the learning-rate schedule, global norm clipping, the model EMA,
// Mixup and CutMix.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <iostream>
#include <map>
#include <string>

#include "common/parity_python.h"
#include "common/test_utils.h"
#include "data/batch_mixing.h"
#include "framework/io/safetensors.h"
#include "framework/nn/param_arena.h"
#include "framework/ops/cross_entropy.h"
#include "framework/optim/grad_clip.h"
#include "framework/optim/lr_schedule.h"
#include "framework/optim/optimizer.h"

namespace vitddp {
namespace {

using testing::random_tensor;

// A double as a decimal that reads back to the same double.
std::string decimal(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Writes the dump, runs the case and expects it to match.
void expect_parity(const std::string& name, const NamedTensors& dump, const std::map<std::string, std::string>& meta) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("vitddp_recipe_" + name + "_" + std::to_string(::getpid()) +
                                                 ".safetensors"))
          .string();
  write_safetensors(path, dump, meta);
  const std::string out = testing::run_parity_script("recipe_parity.py", name + " " + path);
  std::filesystem::remove(path);
  std::cout << out;
  EXPECT_EQ(out.rfind("OK\n", 0), 0u) << out;
}

TEST(RecipeParity, CrossEntropyWithLabelSmoothingAndSoftTargets) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  Generator gen(31);
  NamedTensors dump;
  std::map<std::string, std::string> meta;
  int cases = 0;
  for (double eps : {0.0, 0.11, 0.3}) {
    for (bool soft : {false, true}) {
      const std::string k = std::to_string(cases++);
      Tensor logits = random_tensor({6, 10}, gen, DType::kF64, -4, 4).set_requires_grad(true);
      Tensor target;
      if (soft) {  // rows of Mixup-like targets: two classes mixed
        target = Tensor::zeros({6, 10}, DType::kF64);
        for (int r = 0; r < 6; ++r) {
          const double lam = gen.uniform();
          target.data<double>()[r * 10 + r] += lam;
          target.data<double>()[r * 10 + (r + 3) % 10] += 1 - lam;
        }
      } else {
        std::vector<int64_t> labels;
        for (int r = 0; r < 6; ++r) labels.push_back(static_cast<int64_t>(gen.next_u64() % 10));
        target = Tensor::from_vector_i64(labels, {6});
      }
      Tensor loss = cross_entropy(logits, target, eps);
      loss.backward();
      dump.emplace_back("logits." + k, logits.detach());
      dump.emplace_back("target." + k, target);
      dump.emplace_back("loss." + k, loss.detach().view_as_shape({1}));
      dump.emplace_back("grad." + k, logits.grad());
      meta["eps." + k] = std::to_string(eps);
    }
  }
  meta["cases"] = std::to_string(cases);
  expect_parity("cross_entropy", dump, meta);
}

// Every step's rate of a schedule, against torch's SequentialLR.
void expect_schedule_parity(LrScheduleConfig c) {
  const LrSchedule schedule(c);
  std::vector<double> lr;
  for (int64_t s = 0; s < c.total_steps; ++s) lr.push_back(schedule.at(s));
  const LrScheduleConfig& fixed = schedule.config();  // step_size filled in
  expect_parity("schedule", {{"lr", Tensor::from_vector(lr, {c.total_steps}, DType::kF64)}},
                {{"kind", c.kind},
                 {"steps", std::to_string(c.total_steps)},
                 {"warmup_steps", std::to_string(c.warmup_steps)},
                 {"base_lr", decimal(c.base_lr)},
                 {"warmup_decay", decimal(c.warmup_decay)},
                 {"min_lr", decimal(c.min_lr)},
                 {"step_size", std::to_string(fixed.step_size)},
                 {"gamma", decimal(c.gamma)}});
}

TEST(RecipeParity, ScheduleEqualsSequentialLrAtEveryStep) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  LrScheduleConfig c;  // torchvision's ViT recipe, in steps: warm-up decay 0.033, cosine to 0
  c.kind = "cosine";
  c.base_lr = 0.003;
  c.total_steps = 1000;
  c.warmup_steps = 100;
  c.warmup_decay = 0.033;
  expect_schedule_parity(c);
  c.min_lr = 1e-5;
  expect_schedule_parity(c);
  c.kind = "step";
  c.step_size = 250;
  c.gamma = 0.5;
  expect_schedule_parity(c);
  c.kind = "constant";
  c.warmup_steps = 7;
  expect_schedule_parity(c);
}

// Two parameters of a step, as one optimizer step sees them.
struct TwoParams {
  Tensor matrix, bias;
  std::unique_ptr<ParamArena> arena;
  explicit TwoParams(Generator& gen) {
    matrix = random_tensor({7, 13}, gen, DType::kF32).set_requires_grad(true);
    bias = random_tensor({13}, gen, DType::kF32).set_requires_grad(true);
    arena = std::make_unique<ParamArena>(NamedTensors{{"matrix", matrix}, {"bias", bias}}, Device::cpu());
  }
  void set_random_grads(Generator& gen, double scale) {
    matrix.grad().copy_(random_tensor({7, 13}, gen, DType::kF32, -scale, scale));
    bias.grad().copy_(random_tensor({13}, gen, DType::kF32, -scale, scale));
  }
};

TEST(RecipeParity, ClippedStepEqualsClipGradNorm) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  Generator gen(32);
  TwoParams p(gen);
  p.set_random_grads(gen, 3.0);  // norm about 17: a max of 1 clips
  NamedTensors dump{{"before.matrix", p.matrix.detach().clone()}, {"before.bias", p.bias.detach().clone()},
                    {"grad.matrix", p.matrix.grad().clone()},      {"grad.bias", p.bias.grad().clone()}};
  std::unique_ptr<Optimizer> sgd = make_sgd(*p.arena, SgdConfig{0.1, 0.9, 0.0});
  GradNormClip clip(*p.arena, 1.0);
  sgd->set_grad_clip(&clip);
  sgd->step();
  EXPECT_LT(clip.scale().item(), 0.2);
  dump.emplace_back("after.matrix", p.matrix.detach().clone());
  dump.emplace_back("after.bias", p.bias.detach().clone());
  dump.emplace_back("norm", clip.norm());
  expect_parity("clip", dump, {{"names", "matrix,bias"}, {"max_norm", "1"}, {"lr", "0.1"}, {"momentum", "0.9"}});
}

TEST(RecipeParity, EmaEqualsTorchvisionsAfterAHundredSteps) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  Generator gen(33);
  TwoParams p(gen);
  std::unique_ptr<Optimizer> adamw = make_adamw(*p.arena, AdamWConfig{0.01, 0.9, 0.999, 1e-8, 0.05});
  adamw->enable_ema(0.9);
  NamedTensors dump{{"step0.matrix", p.matrix.detach().clone()}, {"step0.bias", p.bias.detach().clone()}};
  constexpr int kSteps = 100;
  for (int s = 1; s <= kSteps; ++s) {
    p.set_random_grads(gen, 1.0);
    adamw->step();
    dump.emplace_back("step" + std::to_string(s) + ".matrix", p.matrix.detach().clone());
    dump.emplace_back("step" + std::to_string(s) + ".bias", p.bias.detach().clone());
  }
  const Tensor ema = adamw->ema();
  dump.emplace_back("ema.matrix", ema.as_strided({7, 13}, {13, 1}, p.arena->offset_of(0)).clone());
  dump.emplace_back("ema.bias", ema.as_strided({13}, {1}, p.arena->offset_of(1)).clone());
  expect_parity("ema", dump, {{"names", "matrix,bias"}, {"steps", std::to_string(kSteps)}, {"decay", "0.9"}});
}

// One Mixup and one CutMix draw of BatchMixing against torchvision v2's definitions for the same
// lam (and box centre); the box is partly outside the image, so the clipped area is tested too.
TEST(RecipeParity, MixupAndCutmixEqualTorchvisionV2ForAFixedDraw) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  constexpr int64_t kBatch = 5, kClasses = 7, kH = 12, kW = 16;
  Generator gen(47);
  const Tensor images = random_tensor({kBatch, 3, kH, kW}, gen, DType::kF32);
  Tensor labels = Tensor::empty({kBatch}, DType::kI64);
  for (int64_t i = 0; i < kBatch; ++i) labels.data<int64_t>()[i] = (3 * i + 1) % kClasses;
  labels.data<int64_t>()[2] = labels.data<int64_t>()[1];  // a pair of equal labels
  NamedTensors dump{{"images", images}, {"labels", labels}};
  std::map<std::string, std::string> meta{{"classes", std::to_string(kClasses)}};

  const BatchMixing mixup(0.2, 0.0, kClasses, 5);
  Tensor mixed = images.clone(), targets = Tensor::empty({kBatch, kClasses}, DType::kF32);
  const MixingDraw m = mixup.draw(3, kH, kW);
  ASSERT_EQ(m.kind, MixingDraw::Kind::kMixup);
  mixup.mix(m, mixed, labels, targets);
  dump.emplace_back("mixup_images", mixed);
  dump.emplace_back("mixup_targets", targets.clone());
  meta["mixup_lam"] = decimal(m.lam);

  const BatchMixing cutmix(0.0, 1.0, kClasses, 5);
  MixingDraw c;
  for (int64_t step = 0;; ++step) {  // a box clipped by the border, neither empty nor whole
    c = cutmix.draw(step, kH, kW);
    const bool clipped = c.x1 == 0 || c.y1 == 0 || c.x2 == kW || c.y2 == kH;
    if (clipped && c.target_lam > 0.1 && c.target_lam < 0.9) break;
    ASSERT_LT(step, 1000);
  }
  ASSERT_EQ(c.kind, MixingDraw::Kind::kCutmix);
  mixed = images.clone();
  cutmix.mix(c, mixed, labels, targets);
  dump.emplace_back("cutmix_images", mixed);
  dump.emplace_back("cutmix_targets", targets);
  meta["cutmix_lam"] = decimal(c.lam);
  meta["cutmix_rx"] = std::to_string(c.centre_x);
  meta["cutmix_ry"] = std::to_string(c.centre_y);
  expect_parity("mixup", dump, meta);
}

}  // namespace
}  // namespace vitddp
