#include "framework/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "framework/cuda/check.h"
#include "framework/cuda/context.h"
#include "framework/cuda/stream.h"
#include "framework/io/algorithm_cache.h"
#include "framework/io/file_lock.h"

namespace vitddp::cuda {
namespace {

struct PlanKey {
  int device;
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc, batch, sa, sb, sc;
  DType dtype;
  bool c_f32;
  GemmEpilogue epilogue;
  MatmulPrecision precision;
  bool has_beta;
  int align;  // bytes the operands' addresses are aligned to when below 16 (Note [Operand alignment]); 0: 16 or more
  bool operator==(const PlanKey& o) const {
    return std::tie(device, ta, tb, m, n, k, lda, ldb, ldc, batch, sa, sb, sc, dtype, c_f32, epilogue, precision,
                    has_beta, align) == std::tie(o.device, o.ta, o.tb, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.batch,
                                                 o.sa, o.sb, o.sc, o.dtype, o.c_f32, o.epilogue, o.precision,
                                                 o.has_beta, o.align);
  }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    size_t h = 1469598103934665603ull;
    auto mix = [&](int64_t v) { h = (h ^ static_cast<size_t>(v)) * 1099511628211ull; };
    for (int64_t v : {int64_t(key.device), int64_t(key.ta), int64_t(key.tb), key.m, key.n, key.k, key.lda, key.ldb,
                      key.ldc, key.batch, key.sa, key.sb, key.sc, int64_t(key.dtype), int64_t(key.c_f32),
                      int64_t(key.epilogue), int64_t(key.precision), int64_t(key.has_beta), int64_t(key.align)})
      mix(v);
    return h;
  }
};

// Descriptors are never destroyed: plans live for the process, like cuBLAS's own handles.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool supported = true;  // false: cuBLASLt has no algorithm for this epilogue and shape
};

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    case DType::kF64: return CUDA_R_64F;
    default: break;
  }
  throw Error(std::string("gemm: no matrix product for dtype ") + dtype_name(dtype));
}

DType c_dtype(const GemmArgs& g) { return g.c_f32 ? DType::kF32 : g.dtype; }

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof(stride)));
  }
  return layout;
}

// The problem a plan was made for, as the algorithm cache's key.
std::string describe(const PlanKey& k) {
  std::ostringstream out;
  out << dtype_name(k.dtype) << (k.precision == MatmulPrecision::kTf32 ? " tf32" : "") << " op=" << (k.ta ? 'T' : 'N')
      << (k.tb ? 'T' : 'N') << " m=" << k.m << " n=" << k.n << " k=" << k.k << " ld=" << k.lda << "," << k.ldb << ","
      << k.ldc << " batch=" << k.batch << " strides=" << k.sa << "," << k.sb << "," << k.sc
      << " epilogue=" << static_cast<int>(k.epilogue) << " beta=" << k.has_beta
      << " sms=0";  // every product plans for the whole device; the text keeps earlier files' keys valid
  if (k.c_f32) out << " c=f32";  // appended: the keys of products kept before it existed stay as they were
  if (k.align > 0) out << " align=" << k.align;  // likewise
  return out.str();
}

// One device's kept choices: loaded from its file on first use, written back after each new one.
struct DeviceAlgorithms {
  std::unique_ptr<AlgorithmCache> cache;
  std::string dir;   // the folder it was made for
  std::string path;  // "" : nowhere to keep them
  bool told_unusable = false, told_unsaved = false;  // each note once
};

DeviceAlgorithms& algorithms_for(int device, const CudaContext& ctx) {
  static std::unordered_map<int, DeviceAlgorithms> by_device;
  DeviceAlgorithms& d = by_device[device];
  const std::string dir = gemm_algorithm_cache_dir();
  if (d.cache && d.dir == dir) return d;
  d = DeviceAlgorithms{};
  d.dir = dir;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::ostringstream context;
  context << prop.name << " sm_" << prop.major << prop.minor << " " << ctx.sm_count() << " SMs, cuBLASLt "
          << cublasLtGetVersion();
  d.cache = std::make_unique<AlgorithmCache>(context.str());
  if (dir.empty()) return d;
  std::string name = std::string("gemm-algorithms-") + prop.name + "-cublaslt" + std::to_string(cublasLtGetVersion()) +
                     "-cuda" + std::to_string(device) + ".json";
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') c = '_';
  d.path = dir + "/" + name;
  return d;
}

// The file's lock, held for the object's life, with the kept choices re-read under it (other
// processes may have added some); notes once a file that cannot be used, which the next save
// replaces. Nothing to lock or read without a file.
class RereadUnderLock {
 public:
  explicit RereadUnderLock(DeviceAlgorithms& kept) {
    if (kept.path.empty()) return;
    lock_.emplace(kept.path + ".lock");
    const std::string problem = kept.cache->load(kept.path);
    if (problem.empty() || kept.told_unusable) return;
    std::cerr << "note: GEMM algorithm cache: " << problem << "; tuning afresh and rewriting it\n";
    kept.told_unusable = true;
  }

 private:
  std::optional<FileLock> lock_;
};

cublasLtMatmulAlgo_t algorithm_from(const AlgorithmCache::Record& r) {
  static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(AlgorithmCache::Record), "cuBLASLt algorithm size changed");
  cublasLtMatmulAlgo_t algo;
  std::memcpy(&algo, r.data(), sizeof(algo));
  return algo;
}

AlgorithmCache::Record record_of(const cublasLtMatmulAlgo_t& algo) {
  AlgorithmCache::Record r;
  std::memcpy(r.data(), &algo, sizeof(algo));
  return r;
}

// Whether cuBLASLt accepts `algo` for this plan's problem within our workspace.
bool runs_here(const Plan& plan, cublasLtMatmulAlgo_t algo, CudaContext& ctx) {
  cublasLtMatmulHeuristicResult_t check{};
  return cublasLtMatmulAlgoCheck(ctx.cublaslt(), plan.desc, plan.a, plan.b, plan.c, plan.c, &algo, &check) ==
             CUBLAS_STATUS_SUCCESS &&
         check.workspaceSize <= ctx.workspace_bytes();
}

// The kept choice for `problem`, if there is one this plan can run.
std::optional<cublasLtMatmulAlgo_t> kept_choice(const DeviceAlgorithms& kept, const std::string& problem,
                                                const Plan& plan, CudaContext& ctx) {
  AlgorithmCache::Record record;
  if (!kept.cache->find(problem, &record)) return std::nullopt;
  const cublasLtMatmulAlgo_t algo = algorithm_from(record);
  if (!runs_here(plan, algo, ctx)) return std::nullopt;
  return algo;
}

// Keeps plan->algo for `problem`, unless another process kept a choice for it while this one
// was timing: then the plan takes that one, so that every process makes the file's choice.
void keep_choice(DeviceAlgorithms& kept, const std::string& problem, Plan* plan, CudaContext& ctx) {
  RereadUnderLock reread(kept);
  if (const std::optional<cublasLtMatmulAlgo_t> theirs = kept_choice(kept, problem, *plan, ctx)) {
    plan->algo = *theirs;
    return;
  }
  kept.cache->put(problem, record_of(plan->algo));
  if (kept.path.empty()) return;
  try {
    kept.cache->save(kept.path);
  } catch (const Error& e) {
    if (!kept.told_unsaved)
      std::cerr << "note: GEMM algorithm cache: " << e.what()
                << "; this run's choices are not kept, so later runs may choose differently\n";
    kept.told_unsaved = true;
  }
}

void run_matmul(const Plan& plan, const GemmArgs& g, const cublasLtMatmulAlgo_t& algo, void* c, CudaContext& ctx,
                cudaStream_t stream, cublasStatus_t* status_out = nullptr) {
  cublasStatus_t status;
  if (g.dtype == DType::kF64) {
    double alpha = g.alpha, beta = g.beta;
    status = cublasLtMatmul(ctx.cublaslt(), plan.desc, &alpha, g.a, plan.a, g.b, plan.b, &beta, c, plan.c, c, plan.c,
                            &algo, ctx.workspace(stream), ctx.workspace_bytes(), stream);
  } else {
    status = cublasLtMatmul(ctx.cublaslt(), plan.desc, &g.alpha, g.a, plan.a, g.b, plan.b, &g.beta, c, plan.c, c,
                            plan.c, &algo, ctx.workspace(stream), ctx.workspace_bytes(), stream);
  }
  if (status_out) {
    *status_out = status;
    return;
  }
  CUBLAS_CHECK(status);
}

// Note [Choosing a GEMM algorithm]
// For this model's shapes cuBLASLt's heuristic first choice is not always the fastest
// (measured on an H200: docs/performance.md). So, like XLA's GEMM autotuner, a new shape times
// the heuristic's first candidates once on the real operands (into scratch C, and scratch bias
// for kBiasGradB) and the plan keeps the fastest: a cost on a shape's first step only, skipped
// under CUDA graph capture (no synchronisation there). Close timings pick differently between
// runs, algorithms round differently, and AdamW turns last-bit noise in a zero gradient into
// learning-rate-sized steps, so a resumed run would not repeat an uninterrupted one. Hence the
// choices are kept in a file per GPU model and cuBLASLt version (framework/io/algorithm_cache.h)
// that later runs reuse. Processes sharing the file re-read it under a file lock before choosing
// and before keeping, and a choice kept meanwhile wins; the timing runs unlocked, as it waits
// for the stream, which may wait for a collective a peer joins only after its own lookup.

// The fastest candidate that ran; nothing when none could be timed (the stream is being
// captured, no memory for the scratch output, or every candidate failed).
std::optional<cublasLtMatmulAlgo_t> fastest_algorithm(const Plan& plan, const GemmArgs& g,
                                                      const cublasLtMatmulHeuristicResult_t* results, int found,
                                                      CudaContext& ctx, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return std::nullopt;
  const int64_t c_elements = (g.batch - 1) * g.stride_c + g.ldc * (g.n - 1) + g.m;
  const int64_t bias_elements = g.epilogue == GemmEpilogue::kBiasGradB ? g.n : 0;
  Tensor scratch;
  try {
    scratch = Tensor::empty({c_elements + bias_elements + 256}, c_dtype(g), Device::cuda(ctx.device()));
  } catch (const Error&) {
    return std::nullopt;  // near the memory limit: no timing, the heuristic's choice
  }
  CUDA_CHECK(cudaMemsetAsync(scratch.data_ptr(), 0, scratch.numel() * dtype_size(c_dtype(g)), stream));
  void* c = scratch.data_ptr();
  if (bias_elements > 0) {
    // 256-byte aligned, after C.
    auto at = (reinterpret_cast<uintptr_t>(c) + c_elements * dtype_size(c_dtype(g)) + 255) / 256 * 256;
    void* bias = reinterpret_cast<void*>(at);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  } else if (g.epilogue == GemmEpilogue::kBias) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  constexpr int kRepeats = 3;
  int best = -1;
  float best_ms = std::numeric_limits<float>::max();
  for (int i = 0; i < found; ++i) {
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    run_matmul(plan, g, results[i].algo, c, ctx, stream, &status);  // warm-up (and: does it run at all?)
    if (status != CUBLAS_STATUS_SUCCESS) continue;
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < kRepeats; ++r) run_matmul(plan, g, results[i].algo, c, ctx, stream);
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (ms < best_ms) {
      best_ms = ms;
      best = i;
    }
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  CUDA_CHECK(cudaStreamSynchronize(stream));  // the scratch goes back to the allocator
  if (best < 0) return std::nullopt;
  return results[best].algo;
}

Plan make_plan(const GemmArgs& g, const PlanKey& key, CudaContext& ctx, MatmulPrecision precision,
               cudaStream_t stream) {
  Plan plan;
  cudaDataType_t type = cuda_type(g.dtype);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  if (g.dtype == DType::kF64) {
    compute = CUBLAS_COMPUTE_64F;
    scale = CUDA_R_64F;
  } else if (g.dtype == DType::kF32 && precision == MatmulPrecision::kTf32) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, compute, scale));
  cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (g.epilogue != GemmEpilogue::kNone) {
    cublasLtEpilogue_t epi = g.epilogue == GemmEpilogue::kBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    cudaDataType_t bias_type = type;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof(bias_type)));
  }
  plan.a = make_layout(type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, g.batch, g.stride_a);
  plan.b = make_layout(type, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, g.batch, g.stride_b);
  plan.c = make_layout(cuda_type(c_dtype(g)), g.m, g.n, g.ldc, g.batch, g.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = ctx.workspace_bytes();
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  if (key.align > 0) {  // Note [Operand alignment]
    const uint32_t align = static_cast<uint32_t>(key.align);
    for (cublasLtMatmulPreferenceAttributes_t attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
  }
  constexpr int candidates = kGemmCandidates;
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(candidates));
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(ctx.cublaslt(), plan.desc, plan.a, plan.b, plan.c,
                                                               plan.c, pref, candidates, results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (g.epilogue == GemmEpilogue::kBiasGradB && (status != CUBLAS_STATUS_SUCCESS || found == 0)) {
    plan.supported = false;  // the caller reduces the bias gradient itself
    return plan;
  }
  CUBLAS_CHECK(status);
  VITDDP_CHECK(found > 0, "cuBLASLt found no algorithm for a ", dtype_name(g.dtype), " product m=", g.m, " n=", g.n,
               " k=", g.k);
  plan.algo = results[0].algo;
  if (found > 1 && gemm_autotune()) {
    DeviceAlgorithms& kept = algorithms_for(key.device, ctx);
    const std::string problem = describe(key);
    {
      RereadUnderLock reread(kept);
      if (const std::optional<cublasLtMatmulAlgo_t> algo = kept_choice(kept, problem, plan, ctx)) {
        plan.algo = *algo;  // chosen by an earlier run (or another process): choose it again
        return plan;
      }
    }
    // Timed without the file lock: the timing waits for this stream, which may wait for a
    // collective that a process sharing the file can only join once it has the lock.
    const std::optional<cublasLtMatmulAlgo_t> fastest = fastest_algorithm(plan, g, results.data(), found, ctx, stream);
    if (!fastest) return plan;  // the heuristic's choice, not kept
    plan.algo = *fastest;
    keep_choice(kept, problem, &plan, ctx);
  }
  return plan;
}

// Note [Operand alignment]
// cuBLASLt's heuristic assumes operands aligned to 256 bytes unless told, and may then choose an
// algorithm that refuses a less aligned one at run time (PowerSGD's rank-1 bf16 factors are
// slices at any element). Decision: an address below 16-byte alignment (the allocator's blocks
// and the arena's parameters are aligned far beyond) is told to the heuristic and is part of the
// plan's key; every other product plans exactly as before.
int operand_alignment(const GemmArgs& g) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(g.a) | reinterpret_cast<uintptr_t>(g.b) | reinterpret_cast<uintptr_t>(g.c);
  if (g.batch > 1) {  // every batch entry's addresses
    const uintptr_t ab = dtype_size(g.dtype), c = g.c_f32 ? 4 : ab;
    bits |= static_cast<uintptr_t>(g.stride_a) * ab | static_cast<uintptr_t>(g.stride_b) * ab |
            static_cast<uintptr_t>(g.stride_c) * c;
  }
  int align = 1;
  while (align < 16 && !(bits & static_cast<uintptr_t>(align))) align *= 2;
  return align < 16 ? align : 0;
}

PlanKey key_of(const GemmArgs& g, const CudaContext& ctx) {
  return PlanKey{ctx.device(), g.trans_a, g.trans_b, g.m,     g.n,        g.k,        g.lda,    g.ldb,
                 g.ldc,        g.batch,   g.stride_a, g.stride_b, g.stride_c, g.dtype, g.c_f32, g.epilogue,
                 matmul_precision(), g.beta != 0.0f, operand_alignment(g)};
}

std::mutex g_plans_mutex;
std::unordered_map<PlanKey, Plan, PlanKeyHash>& plans() {
  static std::unordered_map<PlanKey, Plan, PlanKeyHash> by_key;
  return by_key;
}

}  // namespace

bool gemm_planned(const GemmArgs& g) {
  const CudaContext& ctx = CudaContext::for_device(current_device());
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  return plans().count(key_of(g, ctx)) > 0;
}

bool try_gemm(const GemmArgs& g, cudaStream_t stream) {
  VITDDP_ASSERT(g.m > 0 && g.n > 0 && g.k > 0 && g.batch > 0, "gemm with an empty dimension");
  VITDDP_CHECK(!g.c_f32 || ((g.dtype == DType::kBF16 || g.dtype == DType::kF16) && g.epilogue == GemmEpilogue::kNone),
               "gemm: an f32 C takes bf16 or f16 A and B and no epilogue, got ", dtype_name(g.dtype));
  VITDDP_ASSERT(g.epilogue == GemmEpilogue::kNone || g.bias != nullptr, "gemm: bias epilogue without a bias");
  CudaContext& ctx = CudaContext::for_device(current_device());
  const PlanKey key = key_of(g, ctx);
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  auto it = plans().find(key);
  if (it == plans().end())
    it = plans().emplace(key, make_plan(g, key, ctx, key.precision, stream)).first;
  const Plan& plan = it->second;
  if (!plan.supported) return false;
  if (g.epilogue != GemmEpilogue::kNone)  // the bias pointer changes per call; the descriptor is shared
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  if (g.epilogue == GemmEpilogue::kBiasGradB) {  // may still refuse: then nothing ran, the caller falls back
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    run_matmul(plan, g, plan.algo, g.c, ctx, stream, &status);
    return status == CUBLAS_STATUS_SUCCESS;
  }
  run_matmul(plan, g, plan.algo, g.c, ctx, stream);
  return true;
}

void gemm(const GemmArgs& g, cudaStream_t stream) {
  VITDDP_CHECK(try_gemm(g, stream), "cuBLASLt has no algorithm for a ", dtype_name(g.dtype),
               " product with a bias-gradient epilogue, m=", g.m, " n=", g.n, " k=", g.k);
}

}  // namespace vitddp::cuda
