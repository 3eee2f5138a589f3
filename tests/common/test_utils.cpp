#include "common/test_utils.h"

#include <cmath>

#include "framework/autograd/grad_mode.h"

namespace vitddp::testing {

Tensor random_tensor(const Shape& shape, Generator& gen, DType dtype, double low, double high) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_uniform(t, gen, low, high);
  return t;
}

double relative_error(const Tensor& a, const Tensor& b) {
  std::vector<double> va = a.to_vector(), vb = b.to_vector();
  EXPECT_EQ(va.size(), vb.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i) {
    num += (va[i] - vb[i]) * (va[i] - vb[i]);
    den += vb[i] * vb[i];
  }
  if (std::isnan(num)) return INFINITY;
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> va = a.to_vector(), vb = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i) {
    double d = std::fabs(va[i] - vb[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

namespace {
double weighted_sum(const Tensor& out, const std::vector<double>& w) {
  std::vector<double> v = out.to_vector();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}
}  // namespace

::testing::AssertionResult gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, double eps, double atol,
                                     double rtol) {
  for (const Tensor& t : inputs) {
    if (t.dtype() != DType::kI64 && t.dtype() != DType::kF64)
      return ::testing::AssertionFailure() << "gradcheck needs f64 inputs, got " << t.description();
    if (t.requires_grad()) t.impl().autograd->grad.reset();
  }
  Tensor out = fn(inputs);
  Generator gen(1234);
  Tensor weights = random_tensor(out.shape(), gen, DType::kF64);
  std::vector<double> w = weights.to_vector();
  out.backward(weights);

  NoGradGuard no_grad;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    Tensor analytic = x.grad();
    if (!analytic.defined()) return ::testing::AssertionFailure() << "input " << k << " got no gradient";
    std::vector<double> a = analytic.to_vector();
    // Perturb a private contiguous copy, so views among the inputs stay consistent.
    Tensor probe = x.contiguous();
    double* data = probe.data<double>();
    for (int64_t i = 0; i < probe.numel(); ++i) {
      double saved = data[i];
      std::vector<Tensor> args = inputs;
      args[k] = probe;
      data[i] = saved + eps;
      double plus = weighted_sum(fn(args), w);
      data[i] = saved - eps;
      double minus = weighted_sum(fn(args), w);
      data[i] = saved;
      double numeric = (plus - minus) / (2 * eps);
      if (!(std::fabs(numeric - a[i]) <= atol + rtol * std::fabs(numeric)))
        return ::testing::AssertionFailure() << "input " << k << " " << x.description() << " element " << i
                                             << ": analytic " << a[i] << " vs numeric " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult throws_with(const std::function<void()>& body, const std::vector<std::string>& parts) {
  try {
    body();
  } catch (const Error& e) {
    std::string what = e.what();
    for (const std::string& part : parts)
      if (what.find(part) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << what << "\" lacks \"" << part << "\"";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-vitddp exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace vitddp::testing
