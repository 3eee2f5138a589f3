// `train bench allreduce`. See train/bench/allreduce_bench.h.
#include "train/bench/allreduce_bench.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <set>

#include "distributed/launcher.h"
#include "distributed/process_group.h"
#include "framework/core/devices.h"
#include "framework/core/error.h"
#include "framework/core/scalar_types.h"
#include "models/vit/vit_config.h"
#include "train/config.h"
#include "train/cpu_allreduce_choice.h"
#include "train/device_choice.h"
#include "train/exit_codes.h"
#include "train/observe/slow_rank.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/device.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp::bench {

constexpr int64_t kKiB = int64_t{1} << 10;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kTiB = int64_t{1} << 40;

// ---- sizes ----

int64_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t begin = text.find_first_not_of(" \t");
  size_t end = text.find_last_not_of(" \t");
  const std::string s = begin == std::string::npos ? std::string() : text.substr(begin, end - begin + 1);
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  std::string suffix;
  for (char c : s.substr(digits)) suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int64_t unit = 0;
  if (suffix.empty() || suffix == "b") unit = 1;
  if (suffix == "k" || suffix == "kb" || suffix == "kib") unit = kKiB;
  if (suffix == "m" || suffix == "mb" || suffix == "mib") unit = kMiB;
  if (suffix == "g" || suffix == "gb" || suffix == "gib") unit = kGiB;
  VITDDP_CHECK(digits > 0 && digits <= 13 && unit > 0, flag, ": '", text,
               "' is not a size (bytes, or a whole number with K, M or G: 4096, 64K, 1M, 1224MB, 1GiB)");
  const int64_t value = std::stoll(s.substr(0, digits));
  VITDDP_CHECK(value > 0, flag, ": sizes must be positive, got '", text, "'");
  VITDDP_CHECK(value <= kTiB / unit, flag, ": '", text, "' is above 1 TiB");
  return value * unit;
}

std::vector<int64_t> parse_size_list(const std::string& text, const std::string& flag) {
  std::set<int64_t> sizes;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    sizes.insert(parse_byte_size(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start), flag));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return {sizes.begin(), sizes.end()};
}

std::vector<int64_t> doubling_sizes(int64_t min_bytes, int64_t max_bytes) {
  VITDDP_CHECK(min_bytes > 0 && min_bytes <= max_bytes, "--min-bytes (", min_bytes, ") must be positive and <= --max-bytes (",
               max_bytes, ")");
  std::vector<int64_t> sizes;
  for (int64_t b = min_bytes; b <= max_bytes; b *= 2) {
    sizes.push_back(b);
    if (b > max_bytes / 2) break;
  }
  return sizes;
}

int64_t vit_l32_gradient_bytes(DType dtype) {
  return vit_config_by_name("vit_l_32").parameter_count() * static_cast<int64_t>(dtype_size(dtype));
}

std::vector<int64_t> default_sizes(DType dtype) {
  std::vector<int64_t> sizes = doubling_sizes(kMiB, kGiB);
  sizes.push_back(vit_l32_gradient_bytes(dtype));
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

std::string format_bytes(int64_t bytes) {
  char buf[64];
  if (bytes >= kGiB && bytes % kGiB == 0) return std::to_string(bytes / kGiB) + " GiB";
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  if (bytes >= kKiB && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + " KiB";
  if (bytes >= kMiB) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(bytes) / kMiB);
    return buf;
  }
  if (bytes >= kKiB) {
    std::snprintf(buf, sizeof(buf), "%.2f KiB", static_cast<double>(bytes) / kKiB);
    return buf;
  }
  return std::to_string(bytes) + " B";
}

// ---- bandwidth ----

double allreduce_bus_bandwidth(double algbw, int world) {
  VITDDP_ASSERT(world >= 1);
  return algbw * 2.0 * (world - 1) / world;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// ---- check (Note [All-reduce check pattern]) ----

namespace {

void check_dtype(DType dtype) {
  VITDDP_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "the all-reduce bench runs f32 or bf16, got ",
               dtype_name(dtype));
}

// Significand bits: integers up to 2^p are exact.
int significand_bits(DType dtype) { return dtype == DType::kBF16 ? 8 : 24; }

}  // namespace

int64_t check_pattern_period(DType dtype) {
  check_dtype(dtype);
  return dtype == DType::kBF16 ? 13 : 1021;
}

double fill_value(int rank, int64_t index, DType dtype) {
  return static_cast<double>(rank + 1) + static_cast<double>(index % check_pattern_period(dtype));
}

double expected_sum(int world, int64_t index, DType dtype) {
  const double n = world;
  return n * (n + 1) / 2 + n * static_cast<double>(index % check_pattern_period(dtype));
}

double sum_tolerance(int world, double expected, DType dtype) {
  const int p = significand_bits(dtype);
  if (expected <= std::ldexp(1.0, p)) return 0;  // every partial sum is an exact integer
  const double nu = (world - 1) * std::ldexp(1.0, -p);
  return nu / (1 - nu) * expected;
}

Tensor make_check_pattern(int64_t elements, DType dtype, int rank) {
  check_dtype(dtype);
  Tensor t = Tensor::empty({elements}, dtype);
  const int64_t period = check_pattern_period(dtype);
  dispatch_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16_t>) {
      T* data = t.data<T>();
      for (int64_t i = 0, j = 0; i < elements; ++i, j = j + 1 == period ? 0 : j + 1)
        data[i] = T(static_cast<float>(rank + 1 + j));
    }
  });
  return t;
}

CheckResult check_allreduce_result(const Tensor& result, int world, bool average) {
  const DType dtype = result.dtype();
  check_dtype(dtype);
  VITDDP_CHECK(result.device().is_cpu() && result.is_contiguous(), "check_allreduce_result: needs a contiguous CPU tensor, got ",
               result.description());
  const int64_t period = check_pattern_period(dtype);
  std::vector<double> expected(period), tolerance(period);
  for (int64_t j = 0; j < period; ++j) {
    expected[j] = expected_sum(world, j, dtype);
    tolerance[j] = sum_tolerance(world, expected[j], dtype);
    if (average) {  // one more rounding per rank for the 1/n (NCCL scales before or after the sum)
      tolerance[j] = (tolerance[j] + (world + 1) * std::ldexp(expected[j], -significand_bits(dtype))) / world;
      expected[j] /= world;
    }
  }
  CheckResult check;
  const int64_t n = result.numel();
  dispatch_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16_t>) {
      const T* data = result.data<T>();
      for (int64_t i = 0, j = 0; i < n; ++i, j = j + 1 == period ? 0 : j + 1) {
        double error = std::fabs(static_cast<double>(static_cast<float>(data[i])) - expected[j]);
        if (std::isnan(error)) error = std::numeric_limits<double>::infinity();
        if (error > check.max_abs_error) {
          check.max_abs_error = error;
          check.worst_index = i;
        }
        if (error > tolerance[j]) check.ok = false;
      }
    }
  });
  return check;
}

// ---- report ----

AllreduceRow make_row(int64_t bytes, DType dtype, double time_us, int world, const CheckResult& check) {
  AllreduceRow row;
  row.bytes = bytes;
  row.elements = bytes / static_cast<int64_t>(dtype_size(dtype));
  row.time_us = time_us;
  row.algbw_gbps = time_us > 0 ? static_cast<double>(bytes) / time_us / 1e3 : 0;  // bytes/us = 1e6 B/s
  row.busbw_gbps = allreduce_bus_bandwidth(row.algbw_gbps, world);
  row.check = check;
  return row;
}

std::string check_text(const CheckResult& check) {
  char buf[128];
  if (check.ok && check.max_abs_error == 0) return "ok";
  if (check.ok) {
    std::snprintf(buf, sizeof(buf), "ok (max error %g)", check.max_abs_error);
  } else {
    std::snprintf(buf, sizeof(buf), "FAIL: max error %g at element %lld", check.max_abs_error,
                  static_cast<long long>(check.worst_index));
  }
  return buf;
}

namespace {

const char* kRowFormat = "| %-30s | %13s | %12s | %11s | %12s | %12s | %s |\n";

std::string table_line(const std::string& size, const std::string& bytes, const std::string& elements,
                       const std::string& time, const std::string& algbw, const std::string& busbw,
                       const std::string& check) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), kRowFormat, size.c_str(), bytes.c_str(), elements.c_str(), time.c_str(),
                algbw.c_str(), busbw.c_str(), check.c_str());
  return buf;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> piece_ranges(int64_t elements, int pieces) {
  VITDDP_CHECK(pieces >= 1, "--pieces must be >= 1, got ", pieces);
  VITDDP_CHECK(elements >= pieces, "--pieces ", pieces, ": a size of ", elements, " elements cannot be cut into ",
               pieces, " slices");
  constexpr int64_t kAlign = 64;  // slices on 64-element boundaries, as the host copy's parts
  const bool aligned = elements / pieces >= kAlign;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t begin = 0;
  for (int i = 1; i <= pieces; ++i) {
    int64_t end = elements * i / pieces;
    if (aligned && i < pieces) end = end / kAlign * kAlign;
    ranges.emplace_back(begin, end);
    begin = end;
  }
  return ranges;
}

std::string markdown_preamble(const AllreduceRun& run) {
  std::string out = detail::concat("all-reduce (", run.average ? "avg" : "sum", ", in place) over ", run.world, run.world == 1 ? " rank" : " ranks",
                                   ": ", run.backend, " on ", run.device, ", ", dtype_name(run.dtype), "; time = median of ",
                                   run.iters, " iterations after ", run.warmup_iters, " warm-up (",
                                   run.device == "cpu" ? "wall clock" : "CUDA events", "), the slowest rank's\n");
  if (run.pieces > 1)
    out += detail::concat("each size as ", run.pieces, " all-reduces of consecutive slices, back to back (--pieces)\n");
  if (run.backend == "nccl+host-copy")
    out += detail::concat("host copy: all-reduces ", run.host_copy_overlap ? "overlapping" : "in series",
                          ", additions ", run.host_copy_reduce_beside ? "beside the copies" : "on the receiving stream",
                          "\n");
  out += "algbw = bytes / time, busbw = algbw * 2(n-1)/n (GB/s = 1e9 B/s); check: every rank's result against "
         "the exact sum of the ranks' fills (divided by the ranks for avg)\n\n";
  out += table_line("size", "bytes", "elements", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "check");
  out += "|:" + std::string(31, '-') + "|" + std::string(14, '-') + ":|" + std::string(13, '-') + ":|" +
         std::string(12, '-') + ":|" + std::string(13, '-') + ":|" + std::string(13, '-') + ":|:------|\n";
  return out;
}

std::string markdown_row(const AllreduceRow& row) {
  const std::string size = format_bytes(row.bytes) + (row.label.empty() ? "" : " (" + row.label + ")");
  return table_line(size, std::to_string(row.bytes), std::to_string(row.elements), fixed(row.time_us, 1),
                    fixed(row.algbw_gbps, 2), fixed(row.busbw_gbps, 2), check_text(row.check));
}

std::string allreduce_table_markdown(const AllreduceRun& run, const std::vector<AllreduceRow>& rows) {
  std::string out = markdown_preamble(run);
  for (const AllreduceRow& row : rows) out += markdown_row(row);
  return out;
}

nlohmann::json row_json(const AllreduceRun& run, const AllreduceRow& row) {
  nlohmann::json j;
  j["bench"] = "allreduce";
  j["backend"] = run.backend;
  j["device"] = run.device;
  j["world_size"] = run.world;
  j["dtype"] = dtype_name(run.dtype);
  j["op"] = run.average ? "avg" : "sum";
  j["pieces"] = run.pieces;
  if (run.backend == "nccl+host-copy") {
    j["host_copy_overlap"] = run.host_copy_overlap;
    j["host_copy_additions"] = run.host_copy_reduce_beside ? "beside" : "inline";
  }
  j["bytes"] = row.bytes;
  j["elements"] = row.elements;
  if (!row.label.empty()) j["label"] = row.label;
  j["time_us"] = row.time_us;
  j["algbw_gbps"] = row.algbw_gbps;
  j["busbw_gbps"] = row.busbw_gbps;
  j["check"] = row.check.ok ? "ok" : "fail";
  // JSON has no infinity: a NaN result (error recorded as infinite) is written as null.
  if (std::isfinite(row.check.max_abs_error)) {
    j["max_abs_error"] = row.check.max_abs_error;
  } else {
    j["max_abs_error"] = nullptr;
  }
  j["iters"] = run.iters;
  j["warmup_iters"] = run.warmup_iters;
  j["timing"] = run.device == "cpu" ? "wall clock" : "cuda events";
  nlohmann::json env = nlohmann::json::object();
  for (const char* name : {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE", "NCCL_P2P_LEVEL", "NCCL_ALGO",
                           "NCCL_PROTO"})
    if (const char* value = std::getenv(name)) env[name] = value;
  if (run.backend.rfind("nccl", 0) == 0) j["nccl_env"] = env;
  return j;
}

// ---- the command ----

namespace {

struct BenchFlags {
  std::string sizes;
  std::string min_bytes;
  std::string max_bytes;
  std::string dtype = "f32";
  std::string op = "sum";
  int iters = 20;
  int warmup_iters = 5;
  int pieces = 1;
  int gpus = 0;
  int procs = 0;
  double timeout = 300;
  bool host_copy = false;
  bool host_copy_overlap = false;
  bool host_copy_reduce_beside = false;
  std::string cpu_allreduce = "gloo";
  double bypass_wait_ms = 2.0;
  bool json = false;
  std::string out;
};

// Parses argv[3...]; returns false after printing --help.
bool parse_flags(int argc, char** argv, BenchFlags* f) {
  CLI::App app{"train bench allreduce: all-reduce time, algbw and busbw per size, like nccl-tests' all_reduce_perf",
               "train bench allreduce"};
  app.set_config();
  auto last = CLI::MultiOptionPolicy::TakeLast;
  app.add_option("--sizes", f->sizes, "comma-separated sizes (4096, 64K, 1M, 1224MB; K/M/G are powers of 1024)")
      ->multi_option_policy(last);
  app.add_option("--min-bytes", f->min_bytes, "smallest size; sizes double up to --max-bytes (default 1M)")
      ->multi_option_policy(last);
  app.add_option("--max-bytes", f->max_bytes, "largest size (default 1G)")->multi_option_policy(last);
  app.add_option("--dtype", f->dtype, "f32 or bf16")->capture_default_str()->multi_option_policy(last);
  app.add_option("--op", f->op, "sum, or avg (as DDP's gradients: NCCL divides by the ranks in the collective)")
      ->capture_default_str()
      ->multi_option_policy(last);
  app.add_option("--iters", f->iters, "timed iterations per size")->capture_default_str()->multi_option_policy(last);
  app.add_option("--warmup-iters", f->warmup_iters, "untimed iterations before them")
      ->capture_default_str()
      ->multi_option_policy(last);
  app.add_option("--pieces", f->pieces,
                 "all-reduce each size as this many collectives on consecutive slices, back to back (as DDP's "
                 "buckets); the time covers them all")
      ->capture_default_str()
      ->multi_option_policy(last);
  app.add_option("--gpus", f->gpus, "all-reduce across this many GPUs (NCCL, one process each)")->multi_option_policy(last);
  app.add_option("--procs", f->procs, "all-reduce across this many CPU processes (Gloo)")->multi_option_policy(last);
  app.add_flag("--host-copy", f->host_copy,
               "with --gpus: all-reduce through shared host memory and the copy engines, as train's "
               "transport host-copy");
  app.add_flag("--host-copy-overlap", f->host_copy_overlap,
               "with --host-copy: back-to-back all-reduces overlap their copies, as train's host-copy-overlap (with "
               "--pieces, what that gains)");
  app.add_flag("--host-copy-reduce-beside", f->host_copy_reduce_beside,
               "with --host-copy: the additions on a stream of their own beside the copies, as train's "
               "host-copy-reduce-beside");
  app.add_option("--cpu-allreduce", f->cpu_allreduce,
                 "with --procs: gloo (Gloo's ring), ring (the project's), or bypass-ring (its ring with the straggler "
                 "bypass), as train's cpu-allreduce; VITDDP_SLOW_RANK=RANK:SECONDS[:REDUCE] makes one rank slow")
      ->capture_default_str();
  app.add_option("--bypass-wait-ms", f->bypass_wait_ms, "with --cpu-allreduce bypass-ring: as train's bypass-wait-ms")
      ->capture_default_str();
  app.add_option("--timeout", f->timeout, "seconds a collective may take before the run stops with an error")
      ->capture_default_str()
      ->multi_option_policy(last);
  app.add_flag("--json", f->json, "print one JSON line per size instead of the table");
  app.add_option("--out", f->out, "also write the JSON lines to this file")->multi_option_policy(last);
  try {
    // argv[2] ("allreduce") stands where CLI11 expects the program name.
    app.parse(argc - 2, argv + 2);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return false;
  } catch (const CLI::ParseError& e) {
    throw Error(e.what());
  }
  return true;
}

struct BenchPlan {
  std::vector<int64_t> sizes;
  bool default_list = false;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
};

BenchPlan make_plan(const BenchFlags& f) {
  BenchPlan plan;
  VITDDP_CHECK(f.dtype == "f32" || f.dtype == "bf16", "--dtype must be f32 or bf16, got '", f.dtype, "'");
  plan.dtype = f.dtype == "bf16" ? DType::kBF16 : DType::kF32;
  VITDDP_CHECK(f.op == "sum" || f.op == "avg", "--op must be sum or avg, got '", f.op, "'");
  plan.op = f.op == "avg" ? ReduceOp::kAvg : ReduceOp::kSum;
  // The limits train's own flags have (TrainConfig::validate): no overflow, no deadline past the clock.
  VITDDP_CHECK(f.iters >= 1 && f.iters <= 1000000, "--iters must be in [1, 1000000], got ", f.iters);
  VITDDP_CHECK(f.warmup_iters >= 0 && f.warmup_iters <= 1000000, "--warmup-iters must be in [0, 1000000], got ",
               f.warmup_iters);
  VITDDP_CHECK(f.pieces >= 1 && f.pieces <= 4096, "--pieces must be in [1, 4096], got ", f.pieces);
  VITDDP_CHECK(f.gpus >= 0, "--gpus must be >= 0, got ", f.gpus);
  check_procs_flag(f.procs);
  VITDDP_CHECK(f.gpus == 0 || f.procs == 0, "--gpus and --procs exclude each other");
  VITDDP_CHECK(!f.host_copy_overlap || f.host_copy, "--host-copy-overlap needs --host-copy");
  (void)cpu_allreduce_from_name(f.cpu_allreduce);  // throws on a name that is not one
  VITDDP_CHECK(f.cpu_allreduce == "gloo" || f.procs > 0, "--cpu-allreduce ", f.cpu_allreduce,
               " sums over CPU processes: it needs --procs N");
  VITDDP_CHECK(f.bypass_wait_ms >= 0, "--bypass-wait-ms must be >= 0, got ", f.bypass_wait_ms);
  VITDDP_CHECK(!f.host_copy_reduce_beside || f.host_copy, "--host-copy-reduce-beside needs --host-copy");
  check_timeout_flag(f.timeout, "--timeout");
  VITDDP_CHECK(f.sizes.empty() || (f.min_bytes.empty() && f.max_bytes.empty()),
               "--sizes excludes --min-bytes and --max-bytes");
  if (!f.sizes.empty()) {
    plan.sizes = parse_size_list(f.sizes, "--sizes");
  } else if (!f.min_bytes.empty() || !f.max_bytes.empty()) {
    const int64_t lo = f.min_bytes.empty() ? kMiB : parse_byte_size(f.min_bytes, "--min-bytes");
    const int64_t hi = f.max_bytes.empty() ? kGiB : parse_byte_size(f.max_bytes, "--max-bytes");
    plan.sizes = doubling_sizes(lo, hi);
  } else {
    plan.sizes = default_sizes(plan.dtype);
    plan.default_list = true;
  }
  const auto element = static_cast<int64_t>(dtype_size(plan.dtype));
  for (int64_t b : plan.sizes) {
    VITDDP_CHECK(b % element == 0, "size ", b, " B is not a whole number of ", dtype_name(plan.dtype), " elements (",
                 element, " bytes each)");
    piece_ranges(b / element, f.pieces);  // throws when a size cannot be cut into that many slices
  }
  return plan;
}

void check_gpus(int wanted, int index) {
  VITDDP_CHECK(VITDDP_WITH_CUDA, "--gpus needs the CUDA backend, and this build has none; --procs N all-reduces over Gloo "
               "on the CPU");
  VITDDP_CHECK(has_nccl_backend(), "--gpus all-reduces over NCCL, and this build has none (nccl.h and libnccl were not found)");
  const int visible = visible_gpu_count();
  VITDDP_CHECK(wanted <= visible, "--gpus ", wanted, " asked for but ", visible, " GPU(s) visible");
  VITDDP_CHECK(index < visible, "this rank's GPU is cuda:", index, " (its local rank), but ", visible,
               " GPU(s) visible");
}

// All-reduces `buffer` as the slices `pieces`, issued back to back; returns the last one's work
// (each waited for by the caller's stream, in order, as DDP's finalize does).
std::shared_ptr<Work> allreduce_pieces(ProcessGroup& group, ReduceOp op, const Tensor& buffer,
                                       const std::vector<std::pair<int64_t, int64_t>>& pieces) {
  std::vector<std::shared_ptr<Work>> works;
  for (const auto& [begin, end] : pieces)
    works.push_back(group.allreduce(buffer.as_strided({end - begin}, {1}, buffer.storage_offset() + begin), op));
  for (size_t i = 0; i + 1 < works.size(); ++i) works[i]->wait();
  return works.back();
}

// Times warm-up + timed iterations of one size (as `pieces`); returns the timed ones in microseconds.
std::vector<double> time_allreduce(ProcessGroup& group, ReduceOp op, const Tensor& pristine, Tensor buffer, int warmup,
                                   int iters, const std::vector<std::pair<int64_t, int64_t>>& pieces) {
  std::vector<double> us;
  if (buffer.device().is_cpu()) {
    for (int it = 0; it < warmup + iters; ++it) {
      buffer.copy_(pristine);
      const auto start = std::chrono::steady_clock::now();
      allreduce_pieces(group, op, buffer, pieces)->wait();
      const auto end = std::chrono::steady_clock::now();
      if (it >= warmup) us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
    return us;
  }
#if VITDDP_WITH_CUDA
  // Events on the current stream around the collective: the copy before it is outside, and
  // Work::wait() makes this stream wait for the communication stream, so `end` follows the
  // collective's completion. The host only waits once, at the end.
  const cudaStream_t stream = cuda::current_stream();
  std::vector<cuda::Event> starts, ends;
  for (int i = 0; i < iters; ++i) {
    starts.push_back(cuda::Event::create(/*timing=*/true));
    ends.push_back(cuda::Event::create(/*timing=*/true));
  }
  std::shared_ptr<Work> work;
  for (int it = 0; it < warmup + iters; ++it) {
    buffer.copy_(pristine);
    if (it >= warmup) starts[it - warmup].record(stream);
    work = allreduce_pieces(group, op, buffer, pieces);
    work->wait();
    if (it >= warmup) ends[it - warmup].record(stream);
  }
  ends.back().synchronize();
  work->done();  // throws when a collective failed or exceeded --timeout
  for (int i = 0; i < iters; ++i) us.push_back(1e3 * ends[i].elapsed_ms_since(starts[i]));
#else
  (void)group;
  (void)pristine;
  (void)warmup;
  (void)iters;
  (void)pieces;
#endif
  return us;
}

// One size on every rank; the returned row (the slowest rank's median, the worst check) is the
// same on every rank.
AllreduceRow bench_size(ProcessGroup& group, Device device, int64_t bytes, const BenchPlan& plan, const BenchFlags& f) {
  const int64_t elements = bytes / static_cast<int64_t>(dtype_size(plan.dtype));
  Tensor pristine = make_check_pattern(elements, plan.dtype, group.rank()).to(device);  // (elements,)
  Tensor buffer = Tensor::empty({elements}, plan.dtype, device);                         // (elements,)
  const std::vector<double> us =
      time_allreduce(group, plan.op, pristine, buffer, f.warmup_iters, f.iters, piece_ranges(elements, f.pieces));
  const CheckResult mine = check_allreduce_result(buffer.to(Device::cpu()), group.size(), plan.op == ReduceOp::kAvg);

  // (world, 4): per rank its median, max error, failed flag and worst index.
  Tensor local = Tensor::from_vector({median(us), mine.max_abs_error, mine.ok ? 0.0 : 1.0,
                                      static_cast<double>(mine.worst_index)},
                                     {4}, DType::kF64)
                     .to(device);
  Tensor all = Tensor::empty({group.size(), 4}, DType::kF64, device);
  group.allgather(local, all)->wait();
  const std::vector<double> v = all.to_vector();
  double time_us = 0;
  CheckResult check;
  for (int r = 0; r < group.size(); ++r) {
    time_us = std::max(time_us, v[4 * r]);
    if (v[4 * r + 2] != 0) check.ok = false;
    if (v[4 * r + 1] > check.max_abs_error) {
      check.max_abs_error = v[4 * r + 1];
      check.worst_index = static_cast<int64_t>(v[4 * r + 3]);
    }
  }
  AllreduceRow row = make_row(bytes, plan.dtype, time_us, group.size(), check);
  if (plan.default_list && bytes == vit_l32_gradient_bytes(plan.dtype)) row.label = "ViT-L/32 gradients";
  return row;
}

}  // namespace

int run_bench_allreduce(int argc, char** argv) {
  BenchFlags flags;
  if (!parse_flags(argc, argv, &flags)) return kExitOk;
  const BenchPlan plan = make_plan(flags);
  RankEnvironment env = read_rank_environment();
  const int processes = std::max(flags.gpus, flags.procs);
  if (!flags.out.empty() && (!env.distributed || env.rank == 0)) {
    // Before anything starts (the launcher checks too, so a bad path is one line, not a failed rank).
    std::ofstream probe(flags.out, std::ios::app);
    VITDDP_CHECK(probe.good(), "--out: cannot write '", flags.out, "': ", std::strerror(errno));
  }
  if (!env.distributed && processes > 1 && flags.gpus > 0) check_gpus(flags.gpus, 0);
  Placement placement;
  placement.processes = processes;
  placement.flag = flags.gpus > 0 ? "--gpus" : "--procs";
  if (std::optional<int> code = launch_if_needed(placement, argc, argv, env, std::cerr)) return *code;

  // Without --gpus or --procs: the GPU of this rank when one is visible, else the CPU.
  const bool on_gpu = flags.gpus > 0 || (flags.procs == 0 && visible_gpu_count() > 0 && has_nccl_backend());
  ProcessGroupOptions options;
  options.rank = env.rank;
  options.world_size = env.world_size;
  options.rendezvous = env.rendezvous;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.timeout * 1000));
  Device device = Device::cpu();
  std::unique_ptr<ProcessGroup> group;
  if (on_gpu) {
    // --gpus: the GPU of the local rank, as train; without it, as train picks (Note [One GPU per rank]).
    const int index = flags.gpus > 0 ? env.local_rank
                                     : rank_gpu(env, visible_gpu_count(), describe_visible_gpus);
    check_gpus(std::max(flags.gpus, 1), index);
#if VITDDP_WITH_CUDA
    cuda::set_device(index);
#endif
    device = Device::cuda(index);
    options.host_copy_allreduce = flags.host_copy;
    options.host_copy_overlap = flags.host_copy_overlap;
    options.host_copy_reduce_beside = flags.host_copy_reduce_beside;
    group = make_nccl_process_group(options);
  } else {
    VITDDP_CHECK(!flags.host_copy, "--host-copy moves GPU buffers: it needs --gpus N");
    options.cpu_allreduce = cpu_allreduce_from_name(flags.cpu_allreduce);
    options.bypass_wait = std::chrono::duration<double>(flags.bypass_wait_ms / 1000);
    apply_slow_rank_from_environment(options);
    group = make_gloo_process_group(options);
  }

  AllreduceRun run;
  run.backend = group->backend();
  run.device = device.is_cuda() ? "cuda" : "cpu";
  run.world = group->size();
  run.dtype = plan.dtype;
  run.average = plan.op == ReduceOp::kAvg;
  run.iters = flags.iters;
  run.warmup_iters = flags.warmup_iters;
  run.pieces = flags.pieces;
  run.host_copy_overlap = flags.host_copy_overlap;
  run.host_copy_reduce_beside = flags.host_copy_reduce_beside;

  const bool report = group->rank() == 0;
  std::ofstream out_file;
  if (report && !flags.out.empty()) {
    out_file.open(flags.out, std::ios::trunc);
    VITDDP_CHECK(out_file.good(), "--out: cannot write '", flags.out, "': ", std::strerror(errno));
  }
  if (report && !flags.json) {
    if (run.world == 1)
      std::cout << "note: one rank, so nothing crosses a link (busbw 0); --gpus N or --procs N runs N ranks\n";
    std::cout << markdown_preamble(run) << std::flush;
  }
  bool all_ok = true;
  for (int64_t bytes : plan.sizes) {
    const AllreduceRow row = bench_size(*group, device, bytes, plan, flags);
    all_ok = all_ok && row.check.ok;
    if (!report) continue;
    const std::string line = row_json(run, row).dump();
    if (flags.json) {
      std::cout << line << std::endl;
    } else {
      std::cout << markdown_row(row) << std::flush;
    }
    if (out_file.is_open()) out_file << line << std::endl;
  }
  group->barrier();
  if (!all_ok)
    throw Error("all-reduce results were wrong (see the check column): the collective or the transport is broken",
                ErrorKind::kInternal);
  return kExitOk;
}

}  // namespace vitddp::bench
