// `train bench allreduce`: all-reduce time and bandwidth over a range of sizes, as nccl-tests'
// all_reduce_perf reports them, through the same ProcessGroup that DDP uses (NCCL on GPUs, one
// process per GPU; Gloo on CPU tensors, so CI runs it across real processes), with a check of
// every result.
//
//   train bench allreduce --gpus 8                       # 1 MiB ... 1 GiB and ViT-L/32's gradients
//   train bench allreduce --procs 2 --sizes 4K,1M --json # Gloo, JSON lines
//
// Per size every rank fills a pristine buffer once, then for each of warm-up + timed iterations
// copies it into the working buffer (outside the timed region) and all-reduces that in place, so
// every iteration sums the same data and the values never grow. Time is the median of the timed
// iterations (CUDA events around the collective on the GPU, wall clock on the CPU), the slowest
// rank's median; algbw = bytes / time; busbw = algbw * 2(n-1)/n. After the last iteration each
// rank compares its result with the closed-form sum (Note [All-reduce check pattern]).
//
// This header's pure parts (sizes, formulas, pattern and check, table rows) are CPU-tested in
// tests/train/bench/allreduce_bench_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/core/tensor.h"

namespace vitddp::bench {

// ---- sizes ----

// "4096", "64K", "1M", "1224MB", "1GiB": bytes. K, M, G (alone, with B or with iB) are powers of
// 1024, as in nccl-tests and --bucket-mb. Throws (bad input) naming `flag` on anything else, on 0
// and on sizes above 1 TiB.
int64_t parse_byte_size(const std::string& text, const std::string& flag);
// A comma-separated list of sizes; returned sorted, without duplicates.
std::vector<int64_t> parse_size_list(const std::string& text, const std::string& flag);
// min, 2 min, 4 min, ... while <= max.
std::vector<int64_t> doubling_sizes(int64_t min_bytes, int64_t max_bytes);
// Bytes of all ViT-L/32 gradients in `dtype` (306,535,400 parameters).
int64_t vit_l32_gradient_bytes(DType dtype);
// 1 MiB ... 1 GiB doubling, plus vit_l32_gradient_bytes(dtype).
std::vector<int64_t> default_sizes(DType dtype);
// "1 MiB", "64 KiB", "1169.35 MiB", "4000 B".
std::string format_bytes(int64_t bytes);

// ---- pieces ----

// `--pieces K`: each size all-reduced as K collectives on consecutive slices, issued back to back
// with no wait between them, as DDP issues its buckets; the time covers all K. The slices'
// [begin, end) element ranges: K nearly equal ones, each starting on a multiple of 64 elements
// where the size allows. Throws (bad input) when a size has fewer elements than pieces.
std::vector<std::pair<int64_t, int64_t>> piece_ranges(int64_t elements, int pieces);

// ---- bandwidth ----

// nccl-tests' bus bandwidth of an all-reduce over `world` ranks: algbw * 2(n-1)/n, the rate each
// link must sustain in a ring, comparable across world sizes (0 for one rank: nothing moves).
double allreduce_bus_bandwidth(double algbw, int world);
double median(std::vector<double> values);

// ---- check ----
// Note [All-reduce check pattern]
// Rank r fills element i with (r + 1) + (i mod P): never zero (a collective that leaves zeros, or
// only this rank's data, fails), different on every rank and along the buffer (a chunk moved to
// the wrong offset fails unless the offset is a multiple of P, an odd prime), and small integers,
// so every partial sum is an integer. The sum over n ranks is n(n+1)/2 + n (i mod P). Integers up
// to 2^24 (f32) or 2^8 (bf16) are exact, whatever the order of additions, so the check is exact
// while the sum stays below that: always for f32 (P = 1021) up to ~4000 ranks, for bf16 (P = 13)
// up to 8 ranks. Beyond, each of the n-1 additions may round by half an ulp, and the check
// allows the recursive-summation bound (n-1)u / (1 - (n-1)u) times the sum (u = 2^-24 or 2^-8).

int64_t check_pattern_period(DType dtype);
double fill_value(int rank, int64_t index, DType dtype);
double expected_sum(int world, int64_t index, DType dtype);
double sum_tolerance(int world, double expected, DType dtype);

// A contiguous CPU tensor of `elements` values of `dtype` (f32 or bf16) holding rank `rank`'s pattern.
Tensor make_check_pattern(int64_t elements, DType dtype, int rank);

struct CheckResult {
  bool ok = true;
  double max_abs_error = 0;  // the largest |result - expected|
  int64_t worst_index = -1;  // where it is (-1 when every element is exact)
};
// Compares a contiguous CPU result with the sum over `world` ranks of their patterns (with
// `average`, that sum divided by `world`, allowing the division's rounding).
CheckResult check_allreduce_result(const Tensor& result, int world, bool average = false);

// ---- report ----

struct AllreduceRow {
  int64_t bytes = 0;
  int64_t elements = 0;
  std::string label;  // "ViT-L/32 gradients" for that size, else empty
  double time_us = 0;
  double algbw_gbps = 0;  // GB/s = 1e9 bytes per second, as nccl-tests
  double busbw_gbps = 0;
  CheckResult check;
};

// Fills elements, algbw and busbw from bytes, time and the world size.
AllreduceRow make_row(int64_t bytes, DType dtype, double time_us, int world, const CheckResult& check);

struct AllreduceRun {
  std::string backend;  // "nccl" or "gloo"
  std::string device;   // "cuda" or "cpu"
  int world = 1;
  DType dtype = DType::kF32;
  int iters = 0;
  int warmup_iters = 0;
  bool average = false;  // --op avg
  int pieces = 1;        // --pieces
  // With --host-copy (backend "nccl+host-copy"): --host-copy-overlap, --host-copy-reduce-beside.
  bool host_copy_overlap = false;
  bool host_copy_reduce_beside = false;
};

// "ok", "ok (max error 0.5)" within bf16 rounding, or "FAIL: max error 3 at element 17".
std::string check_text(const CheckResult& check);
// Two lines describing the run, the markdown header row and its separator.
std::string markdown_preamble(const AllreduceRun& run);
std::string markdown_row(const AllreduceRow& row);
std::string allreduce_table_markdown(const AllreduceRun& run, const std::vector<AllreduceRow>& rows);
nlohmann::json row_json(const AllreduceRun& run, const AllreduceRow& row);

// ---- the command ----

// `train bench allreduce [flags]` (argv[1] == "bench", argv[2] == "allreduce"): with --gpus N or
// --procs N and no rank environment it launches N workers (distributed/launcher.h), otherwise it
// runs as one rank. Returns the exit code; throws vitddp::Error on bad flags and failures.
int run_bench_allreduce(int argc, char** argv);

}  // namespace vitddp::bench
