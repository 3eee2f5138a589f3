#include "framework/cpu/layer_norm.h"

#include <cmath>
#include <vector>

#include "framework/core/scalar_types.h"

namespace vitddp::cpu {

void layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  dispatch_float(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    const int64_t D = w.numel();
    const int64_t rows = D > 0 ? x.numel() / D : 0;
    const T* in = x.data<T>();
    const T* wp = w.data<T>();
    const T* bp = b.data<T>();
    T* out = y.data<T>();
    T* mp = mean.data<T>();
    T* rp = rstd.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = in + r * D;
      double sum = 0;
      for (int64_t i = 0; i < D; ++i) sum += xr[i];
      const double mu = sum / static_cast<double>(D);
      double sq = 0;
      for (int64_t i = 0; i < D; ++i) {
        double c = xr[i] - mu;
        sq += c * c;
      }
      const double rs = 1.0 / std::sqrt(sq / static_cast<double>(D) + eps);
      T* yr = out + r * D;
      for (int64_t i = 0; i < D; ++i)
        yr[i] = static_cast<T>((static_cast<double>(xr[i]) - mu) * rs * static_cast<double>(wp[i]) +
                               static_cast<double>(bp[i]));
      mp[r] = static_cast<T>(mu);
      rp[r] = static_cast<T>(rs);
    }
  });
}

void layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db, GradWrite weight_grads,
                         const Tensor& dx_add) {
  dispatch_float(x.dtype(), "layer_norm backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t D = w.numel();
    const int64_t rows = D > 0 ? x.numel() / D : 0;
    const T* in = x.data<T>();
    const T* wp = w.data<T>();
    const T* g = dy.data<T>();
    const T* mp = mean.data<T>();
    const T* rp = rstd.data<T>();
    std::vector<double> dw_acc(dw.defined() ? D : 0, 0.0), db_acc(db.defined() ? D : 0, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = in + r * D;
      const T* gr = g + r * D;
      const double mu = mp[r], rs = rp[r];
      if (dw.defined() || db.defined()) {
        for (int64_t i = 0; i < D; ++i) {
          if (dw.defined()) dw_acc[i] += static_cast<double>(gr[i]) * (xr[i] - mu) * rs;
          if (db.defined()) db_acc[i] += gr[i];
        }
      }
      if (!dx.defined()) continue;
      // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), with g = dy * w.
      double sum_g = 0, sum_gx = 0;
      for (int64_t i = 0; i < D; ++i) {
        double gi = static_cast<double>(gr[i]) * wp[i];
        sum_g += gi;
        sum_gx += gi * (xr[i] - mu) * rs;
      }
      const double mean_g = sum_g / static_cast<double>(D), mean_gx = sum_gx / static_cast<double>(D);
      T* dxr = dx.data<T>() + r * D;
      for (int64_t i = 0; i < D; ++i) {
        double xhat = (xr[i] - mu) * rs;
        dxr[i] = static_cast<T>(rs * (static_cast<double>(gr[i]) * wp[i] - mean_g - xhat * mean_gx));
        if (dx_add.defined()) dxr[i] += dx_add.data<T>()[r * D + i];  // rounded, then added: as add_new does
      }
    }
    const bool add = weight_grads == GradWrite::kAccumulate;
    if (dw.defined())
      for (int64_t i = 0; i < D; ++i) dw.data<T>()[i] = static_cast<T>(dw_acc[i] + (add ? dw.data<T>()[i] : T(0)));
    if (db.defined())
      for (int64_t i = 0; i < D; ++i) db.data<T>()[i] = static_cast<T>(db_acc[i] + (add ? db.data<T>()[i] : T(0)));
  });
}

}  // namespace vitddp::cpu
