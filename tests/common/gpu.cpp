#include "common/gpu.h"

#include <exception>
#include <thread>

#if VITDDP_WITH_CUDA
#include "framework/cuda/stream.h"
#endif

namespace vitddp::testing {

std::vector<std::string> run_on_gpu_threads(int world, const std::function<void(int rank)>& body) {
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      try {
#if VITDDP_WITH_CUDA
        cuda::set_device(rank);
#endif
        body(rank);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

::testing::AssertionResult cuda_matches_cpu(const TensorFn& fn, const std::vector<Tensor>& cpu_inputs, double rtol,
                                            DType gpu_dtype) {
  std::vector<Tensor> gpu_inputs;
  for (const Tensor& t : cpu_inputs) {
    DType d = t.dtype() == DType::kI64 ? DType::kI64 : gpu_dtype;
    Tensor g = t.detach().to(d).to(Device::cuda(0));
    if (t.requires_grad()) g.set_requires_grad(true);
    gpu_inputs.push_back(g);
  }
  Tensor out_cpu = fn(cpu_inputs);
  Tensor out_gpu = fn(gpu_inputs);
  if (out_gpu.device() != Device::cuda(0))
    return ::testing::AssertionFailure() << "output on " << out_gpu.device().str();
  if (out_cpu.shape() != out_gpu.shape())
    return ::testing::AssertionFailure() << "shapes " << shape_str(out_cpu.shape()) << " vs "
                                         << shape_str(out_gpu.shape());
  double e = relative_error(out_gpu, out_cpu);
  if (!(e <= rtol)) return ::testing::AssertionFailure() << "forward relative error " << e << " > " << rtol;
  if (!out_cpu.requires_grad()) return ::testing::AssertionSuccess();
  Generator gen(99);
  Tensor w = random_tensor(out_cpu.shape(), gen, out_cpu.dtype());
  out_cpu.backward(w);
  out_gpu.backward(w.to(out_gpu.dtype()).to(Device::cuda(0)));
  for (size_t i = 0; i < cpu_inputs.size(); ++i) {
    if (!cpu_inputs[i].requires_grad()) continue;
    Tensor gc = cpu_inputs[i].grad(), gg = gpu_inputs[i].grad();
    if (!gg.defined()) return ::testing::AssertionFailure() << "input " << i << " got no GPU gradient";
    double eg = relative_error(gg, gc);
    if (!(eg <= rtol))
      return ::testing::AssertionFailure() << "input " << i << " gradient relative error " << eg << " > " << rtol;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace vitddp::testing
