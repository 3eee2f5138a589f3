// The backward engine (framework/autograd), exercised through the elementwise, reduce and
// shape ops.
#include <gtest/gtest.h>

#include "common/test_utils.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/reduce.h"
#include "framework/ops/shape_ops.h"

namespace vitddp {
namespace {

using testing::throws_with;

std::vector<double> expected_grad(const Tensor& x, double (*f)(double)) {
  std::vector<double> v = x.to_vector();
  for (double& e : v) e = f(e);
  return v;
}

TEST(Autograd, AccumulatesWhenATensorIsUsedTwice) {
  Tensor x = Tensor::from_vector({1, -2, 3}, {3}, DType::kF64).set_requires_grad(true);
  Tensor y = add(mul(x, x), x);  // dy/dx = 2x + 1
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{3, -3, 7}));
}

TEST(Autograd, AccumulatesAcrossBackwardCalls) {
  Tensor x = Tensor::from_vector({1, 2}, {2}, DType::kF64).set_requires_grad(true);
  sum(scale(x, 3)).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{3, 3}));
  sum(mul(x, x)).backward();  // + 2x
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{5, 7}));
  x.set_grad(Tensor());
  sum(x).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{1, 1}));
}

TEST(Autograd, NonScalarRootTakesAGradient) {
  Tensor x = Tensor::from_vector({1, 2}, {2}, DType::kF64).set_requires_grad(true);
  Tensor y = scale(x, 2);
  EXPECT_TRUE(throws_with([&] { y.backward(); }, {"backward", "non-scalar"}));
  y.backward(Tensor::from_vector({1, 10}, {2}, DType::kF64));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, 20}));
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = Tensor::from_vector({1, 2, 3}, {3}).set_requires_grad(true);
  {
    NoGradGuard no_grad;
    Tensor y = sum(mul(add(x, x), reshape(x, {3})));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(y.grad_fn());
    EXPECT_TRUE(throws_with([&] { y.backward(); }, {"does not require grad"}));
    Tensor v = select(x, 0, 1);
    EXPECT_FALSE(v.requires_grad());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  Tensor z = mul(x, x);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_TRUE(z.grad_fn());
}

TEST(Autograd, LeavesNotRequiringGradGetNoGrad) {
  Tensor x = Tensor::from_vector({1, 2, 3}, {3}, DType::kF64).set_requires_grad(true);
  Tensor c = Tensor::from_vector({4, 5, 6}, {3}, DType::kF64);
  Tensor w = Tensor::from_vector({1, 1, 1}, {1, 3}, DType::kF64);
  sum(mul(add(x, c), expand(w, {2, 3}))).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, 2, 2}));
  EXPECT_FALSE(c.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(c.requires_grad());
  // An op on tensors none of which requires grad records nothing.
  Tensor d = mul(c, c);
  EXPECT_FALSE(d.requires_grad());
  EXPECT_FALSE(d.grad_fn());
}

TEST(Autograd, GradReadyHookFiresOnceWithTheFinalGradient) {
  Tensor x = Tensor::from_vector({1, -2, 3}, {3}, DType::kF64).set_requires_grad(true);
  Tensor b = Tensor::from_vector({0.5, 0.5, 0.5}, {3}, DType::kF64).set_requires_grad(true);
  int x_calls = 0, b_calls = 0;
  std::vector<double> x_seen, b_seen;
  x.register_grad_ready_hook([&](const Tensor& leaf) {
    ++x_calls;
    EXPECT_TRUE(leaf.same_impl(x));
    x_seen = leaf.grad().to_vector();
  });
  b.register_grad_ready_hook([&](const Tensor& leaf) {
    ++b_calls;
    b_seen = leaf.grad().to_vector();
  });
  // x is used in three places along paths of different lengths; the hook must see the sum:
  // d/dx sum(x*x + 3 x + b * x) = 2x + 3 + b.
  Tensor y = add(add(mul(x, x), scale(reshape(x, {1, 3}), 3)), mul(b, permute(reshape(x, {3, 1}), {1, 0})));
  sum(y).backward();
  EXPECT_EQ(x_calls, 1);
  EXPECT_EQ(b_calls, 1);
  EXPECT_EQ(x_seen, (std::vector<double>{5.5, -0.5, 9.5}));
  EXPECT_EQ(b_seen, (std::vector<double>{1, -2, 3}));

  // A second backward (new graph): the hook fires once more and sees the accumulated .grad.
  sum(scale(x, 2)).backward();
  EXPECT_EQ(x_calls, 2);
  EXPECT_EQ(b_calls, 1);  // b is not in this graph
  EXPECT_EQ(x_seen, (std::vector<double>{7.5, 1.5, 11.5}));
}

// A leaf whose accumulator runs without a gradient (an op gave its input none) while it still
// holds last step's (stale, Note [Gradients in place]): its hooks see zeros, not the old values.
TEST(Autograd, AStaleGradientWithNoNewOneIsZeroedBeforeTheHooks) {
  Tensor w = Tensor::from_vector({1.0, 2.0}, {2}, DType::kF32);
  w.set_requires_grad(true);
  AutogradMeta& meta = w.autograd_meta();
  meta.grad = Tensor::from_vector({5.0, -3.0}, {2}, DType::kF32).impl_ptr();
  meta.grad_stale = true;
  std::vector<double> seen;
  w.register_grad_ready_hook([&](const Tensor& leaf) { seen = leaf.grad().to_vector(); });
  grad_accumulator(w)->apply({Tensor()});
  EXPECT_EQ(seen, (std::vector<double>{0.0, 0.0}));
  EXPECT_FALSE(meta.grad_stale);
}

TEST(Autograd, HookCanBeRemoved) {
  Tensor x = Tensor::from_vector({1}, {1}, DType::kF64).set_requires_grad(true);
  int calls = 0;
  int id = x.register_grad_ready_hook([&](const Tensor&) { ++calls; });
  sum(x).backward();
  x.remove_grad_ready_hook(id);
  sum(x).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(throws_with([] { Tensor::zeros({1}).register_grad_ready_hook([](const Tensor&) {}); },
                          {"gradient-ready hooks"}));
}

TEST(Autograd, SecondBackwardThroughAFreedGraphThrows) {
  Tensor x = Tensor::from_vector({1, 2}, {2}, DType::kF64).set_requires_grad(true);
  Tensor y = sum(mul(x, x));
  y.backward();
  EXPECT_TRUE(throws_with([&] { y.backward(); }, {"MulBackward", "second time"}));
}

TEST(Autograd, GradientsOfViewsHaveTheLeafShape) {
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kF64).set_requires_grad(true);
  Tensor y = concat({select(x, 1, 0), slice(reshape(x, {-1}), 0, 4, 6)}, 0);  // x[:,0], x.flat[4:6]
  sum(y).backward();
  EXPECT_EQ(x.grad().shape(), (Shape{2, 3}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{1, 0, 0, 1, 1, 1}));
}

TEST(Autograd, Float32GradientsMatchExpected) {
  Tensor x = Tensor::from_vector({0.5, -1.5, 2}, {3}).set_requires_grad(true);
  mean(mul(x, x)).backward();  // 2x / 3
  std::vector<double> g = x.grad().to_vector();
  std::vector<double> want = expected_grad(x, [](double v) { return 2 * v / 3; });
  ASSERT_EQ(x.grad().dtype(), DType::kF32);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-6);
}


// Note [Sums in the producing kernel]: a node that sums into its input is handed the gradient
// another consumer already sent there, and the engine then takes its gradient as the sum. The
// engine runs later nodes first: a node recorded first runs last.
class ScaledPassThrough final : public Node {
 public:
  ScaledPassThrough(double factor, bool sums) : factor_(factor), sums_(sums) {}
  std::string name() const override { return "ScaledPassThrough"; }
  bool sums_into_input(size_t i) const override { return sums_ && i == 0; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor g = scale(grads[0], factor_);
    seen = pending_grad(0);
    if (seen.defined() && take) {
      g = add(g, seen);
      mark_pending_summed(0);
    }
    return {g};
  }
  Tensor seen;
  bool take = true;

 private:
  double factor_;
  bool sums_;
};

Tensor pass_through(const Tensor& x, const std::shared_ptr<ScaledPassThrough>& node) {
  Tensor y = x.detach().clone();
  record(node, {x}, y);
  return y;
}

TEST(Autograd, ANodeThatSumsIntoItsInputGetsThePendingGradientOnce) {
  for (bool take : {true, false}) {
    SCOPED_TRACE(take ? "node sums" : "node declines");
    Tensor x = Tensor::from_vector({1, 2}, {2}, DType::kF64).set_requires_grad(true);
    auto summing = std::make_shared<ScaledPassThrough>(10.0, true);
    summing->take = take;
    auto plain = std::make_shared<ScaledPassThrough>(3.0, false);
    Tensor a = pass_through(x, summing);  // runs last
    Tensor b = pass_through(x, plain);     // runs first: its 3s are pending at x
    sum(add(a, b)).backward();
    ASSERT_TRUE(summing->seen.defined());
    EXPECT_EQ(summing->seen.to_vector(), (std::vector<double>{3, 3}));
    // Either way 10 + 3, never the pending 3 twice.
    EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{13, 13}));
  }
}

TEST(Autograd, ANodeThatDoesNotSumIsOfferedNothing) {
  Tensor x = Tensor::from_vector({1, 2}, {2}, DType::kF64).set_requires_grad(true);
  auto plain = std::make_shared<ScaledPassThrough>(3.0, false);
  auto summing = std::make_shared<ScaledPassThrough>(10.0, true);
  Tensor b = pass_through(x, plain);     // runs last: the 10s are pending at x
  Tensor a = pass_through(x, summing);  // runs first: nothing pending
  sum(add(a, b)).backward();
  EXPECT_FALSE(plain->seen.defined());
  EXPECT_FALSE(summing->seen.defined());
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{13, 13}));
}

// One tensor passed as two inputs of a summing node: both of its gradients count.
class TwoInputs final : public Node {
 public:
  std::string name() const override { return "TwoInputs"; }
  bool sums_into_input(size_t) const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    std::vector<Tensor> out;
    for (size_t i = 0; i < 2; ++i) {
      Tensor g = scale(grads[0], i == 0 ? 10.0 : 100.0);
      if (pending_grad(i).defined()) {
        g = add(g, pending_grad(i));
        mark_pending_summed(i);
      }
      out.push_back(g);
    }
    return out;
  }
};

TEST(Autograd, ASlotTwoEdgesShareIsNotSummedInTheNode) {
  Tensor x = Tensor::from_vector({1, 2}, {2}, DType::kF64).set_requires_grad(true);
  Tensor y = Tensor::from_vector({0, 0}, {2}, DType::kF64);
  record(std::make_shared<TwoInputs>(), {x, x}, y);  // runs last
  Tensor other = scale(x, 3.0);                       // runs first: 3 pending at x
  sum(add(y, other)).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{113, 113}));
}

}  // namespace
}  // namespace vitddp
