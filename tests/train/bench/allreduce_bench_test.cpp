// `train bench allreduce`: sizes and their parser, the bandwidth formulas, the check pattern
// against closed-form and deliberately wrong sums, the table, and the command end to end over
// Gloo (two CPU processes) with its bad-flag errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/test_utils.h"
#include "common/train_process.h"
#include "framework/core/scalar_types.h"
#include "train/bench/allreduce_bench.h"

namespace vitddp::bench {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(AllreduceBench, ParsesByteSizes) {
  EXPECT_EQ(parse_byte_size("4096", "--sizes"), 4096);
  EXPECT_EQ(parse_byte_size("4096B", "--sizes"), 4096);
  EXPECT_EQ(parse_byte_size("64K", "--sizes"), 64 * 1024);
  EXPECT_EQ(parse_byte_size("64kb", "--sizes"), 64 * 1024);
  EXPECT_EQ(parse_byte_size("1M", "--sizes"), kMiB);
  EXPECT_EQ(parse_byte_size(" 1224MB ", "--sizes"), 1224 * kMiB);
  EXPECT_EQ(parse_byte_size("1GiB", "--sizes"), 1024 * kMiB);
  for (const char* bad : {"", "0", "-1", "1.5M", "1X", "2T", "M", "99999999999999", "2048G"})
    EXPECT_TRUE(testing::throws_with([&] { parse_byte_size(bad, "--max-bytes"); }, {"--max-bytes"})) << bad;
}

TEST(AllreduceBench, SizeListsAreSortedWithoutDuplicates) {
  EXPECT_EQ(parse_size_list("1M,4K,1M,64K", "--sizes"), (std::vector<int64_t>{4096, 65536, kMiB}));
  EXPECT_TRUE(testing::throws_with([] { parse_size_list("1M,,4K", "--sizes"); }, {"--sizes", "not a size"}));
}

TEST(AllreduceBench, DoublingAndDefaultSizes) {
  EXPECT_EQ(doubling_sizes(kMiB, 8 * kMiB), (std::vector<int64_t>{kMiB, 2 * kMiB, 4 * kMiB, 8 * kMiB}));
  EXPECT_EQ(doubling_sizes(3, 20), (std::vector<int64_t>{3, 6, 12}));
  EXPECT_EQ(doubling_sizes(5, 5), (std::vector<int64_t>{5}));
  EXPECT_TRUE(testing::throws_with([] { doubling_sizes(8, 4); }, {"--min-bytes"}));

  // ViT-L/32: 306,535,400 parameters.
  EXPECT_EQ(vit_l32_gradient_bytes(DType::kF32), 1226141600);
  EXPECT_EQ(vit_l32_gradient_bytes(DType::kBF16), 613070800);
  std::vector<int64_t> f32 = default_sizes(DType::kF32);
  ASSERT_EQ(f32.size(), 12u);  // 1 MiB ... 1 GiB (11) + ViT-L/32
  EXPECT_EQ(f32.front(), kMiB);
  EXPECT_EQ(f32[10], 1024 * kMiB);
  EXPECT_EQ(f32.back(), 1226141600);
  std::vector<int64_t> bf16 = default_sizes(DType::kBF16);
  EXPECT_TRUE(std::is_sorted(bf16.begin(), bf16.end()));
  EXPECT_NE(std::find(bf16.begin(), bf16.end(), 613070800), bf16.end());
}

TEST(AllreduceBench, FormatsBytes) {
  EXPECT_EQ(format_bytes(1024 * kMiB), "1 GiB");
  EXPECT_EQ(format_bytes(64 * kMiB), "64 MiB");
  EXPECT_EQ(format_bytes(4096), "4 KiB");
  EXPECT_EQ(format_bytes(3000), "2.93 KiB");
  EXPECT_EQ(format_bytes(1226141600), "1169.34 MiB");
  EXPECT_EQ(format_bytes(100), "100 B");
}

TEST(AllreduceBench, BusBandwidthIsNcclTestsFormula) {
  EXPECT_DOUBLE_EQ(allreduce_bus_bandwidth(10.0, 1), 0.0);
  EXPECT_DOUBLE_EQ(allreduce_bus_bandwidth(10.0, 2), 10.0);
  EXPECT_DOUBLE_EQ(allreduce_bus_bandwidth(10.0, 4), 15.0);
  EXPECT_DOUBLE_EQ(allreduce_bus_bandwidth(10.0, 8), 17.5);
  // 1 GB in 10 ms: 100 GB/s algbw.
  AllreduceRow row = make_row(1000000000, DType::kF32, 10000.0, 8, CheckResult{});
  EXPECT_EQ(row.elements, 250000000);
  EXPECT_DOUBLE_EQ(row.algbw_gbps, 100.0);
  EXPECT_DOUBLE_EQ(row.busbw_gbps, 175.0);
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3.0);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
}

// The sum over `world` ranks as a ring would form it: rank by rank, rounding to the dtype after
// every addition (what Gloo's sum_into and NCCL's bf16 kernels do).
Tensor ring_sum(int64_t elements, DType dtype, int world) {
  Tensor acc = make_check_pattern(elements, dtype, 0);
  for (int r = 1; r < world; ++r) {
    Tensor mine = make_check_pattern(elements, dtype, r);
    dispatch_dtype(dtype, [&](auto zero) {
      using T = decltype(zero);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16_t>) {
        T* a = acc.data<T>();
        const T* b = mine.data<T>();
        for (int64_t i = 0; i < elements; ++i) a[i] = T(static_cast<float>(a[i]) + static_cast<float>(b[i]));
      }
    });
  }
  return acc;
}

TEST(AllreduceBench, PatternIsNonZeroRankDependentAndSumsInClosedForm) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const int64_t n = 3 * check_pattern_period(dtype) + 5;
    Tensor r0 = make_check_pattern(n, dtype, 0), r3 = make_check_pattern(n, dtype, 3);
    std::vector<double> v0 = r0.to_vector(), v3 = r3.to_vector();
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_GE(v0[i], 1.0);
      EXPECT_EQ(v0[i], fill_value(0, i, dtype));
      EXPECT_EQ(v3[i], v0[i] + 3);
    }
    for (int world : {1, 2, 3, 8}) {
      double direct = 0;
      for (int r = 0; r < world; ++r) direct += fill_value(r, 7, dtype);
      EXPECT_EQ(expected_sum(world, 7, dtype), direct);
      CheckResult c = check_allreduce_result(ring_sum(n, dtype, world), world);
      EXPECT_TRUE(c.ok) << dtype_name(dtype) << " world " << world;
      EXPECT_EQ(c.max_abs_error, 0.0) << dtype_name(dtype) << " world " << world;  // exact below 2^p
    }
  }
}

TEST(AllreduceBench, Bf16SumsBeyondExactIntegersPassWithinRounding) {
  // 16 ranks: partial sums reach 136 + 16 * 12 = 328 > 256, so bf16 may round on the way.
  EXPECT_EQ(sum_tolerance(16, 200, DType::kBF16), 0.0);
  EXPECT_GT(sum_tolerance(16, 328, DType::kBF16), 0.0);
  EXPECT_EQ(sum_tolerance(16, 328, DType::kF32), 0.0);
  EXPECT_TRUE(check_allreduce_result(ring_sum(1000, DType::kBF16, 16), 16).ok);
  // 64 ranks: sums up to 2848, where bf16's spacing is 16, so the result is visibly rounded.
  CheckResult c = check_allreduce_result(ring_sum(1000, DType::kBF16, 64), 64);
  EXPECT_TRUE(c.ok);
  EXPECT_GT(c.max_abs_error, 0.0);
  EXPECT_NE(check_text(c).find("ok (max error"), std::string::npos) << check_text(c);
}

TEST(AllreduceBench, CheckCatchesWrongResults) {
  // One wrong element.
  Tensor sum = ring_sum(5000, DType::kF32, 4);
  sum.data<float>()[1234] += 1.0f;
  CheckResult c = check_allreduce_result(sum, 4);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.worst_index, 1234);
  EXPECT_EQ(c.max_abs_error, 1.0);
  EXPECT_EQ(check_text(c), "FAIL: max error 1 at element 1234");
  // Only this rank's data (the collective did nothing), zeros, and a NaN.
  EXPECT_FALSE(check_allreduce_result(make_check_pattern(5000, DType::kF32, 0), 2).ok);
  EXPECT_FALSE(check_allreduce_result(Tensor::zeros({100}), 2).ok);
  Tensor nan = ring_sum(100, DType::kBF16, 2);
  nan.data<bf16_t>()[50] = bf16_t(std::nanf(""));
  c = check_allreduce_result(nan, 2);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.worst_index, 50);
  // A chunk shifted by one element.
  Tensor shifted = ring_sum(4096, DType::kF32, 2);
  float* d = shifted.data<float>();
  std::copy(d + 2049, d + 4096, d + 2048);
  EXPECT_FALSE(check_allreduce_result(shifted, 2).ok);
}

TEST(AllreduceBench, AverageCheckWantsTheSumOverTheRanks) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const int world = 4;
    Tensor sum = ring_sum(3000, dtype, world);
    std::vector<double> v = sum.to_vector();
    for (double& x : v) x /= world;
    Tensor mean = Tensor::from_vector(v, {3000}, DType::kF64).to(dtype);
    EXPECT_TRUE(check_allreduce_result(mean, world, /*average=*/true).ok) << dtype_name(dtype);
    EXPECT_FALSE(check_allreduce_result(sum, world, /*average=*/true).ok) << dtype_name(dtype);  // not divided
    EXPECT_FALSE(check_allreduce_result(mean, world).ok) << dtype_name(dtype);                  // a sum was wanted
  }
}

TEST(AllreduceBench, TableRowsAndJson) {
  AllreduceRun run{"gloo", "cpu", 2, DType::kF32, 20, 5};
  AllreduceRow ok = make_row(kMiB, DType::kF32, 500.0, 2, CheckResult{});
  AllreduceRow vit = make_row(1226141600, DType::kF32, 1e5, 2, CheckResult{});
  vit.label = "ViT-L/32 gradients";
  CheckResult bad{false, 3.0, 17};
  AllreduceRow wrong = make_row(4096, DType::kF32, 20.0, 2, bad);
  const std::string table = allreduce_table_markdown(run, {ok, vit, wrong});
  EXPECT_NE(table.find("over 2 ranks: gloo on cpu, f32; time = median of 20 iterations after 5 warm-up (wall clock)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| size "), std::string::npos) << table;
  EXPECT_NE(markdown_row(ok).find("| 1 MiB "), std::string::npos) << markdown_row(ok);
  EXPECT_NE(markdown_row(ok).find(" 2.10 |"), std::string::npos) << markdown_row(ok);  // 1048576 B / 500 us
  EXPECT_NE(markdown_row(ok).find("| ok |"), std::string::npos) << markdown_row(ok);
  EXPECT_NE(markdown_row(vit).find("1169.34 MiB (ViT-L/32 gradients)"), std::string::npos) << markdown_row(vit);
  EXPECT_NE(markdown_row(wrong).find("| FAIL: max error 3 at element 17 |"), std::string::npos) << markdown_row(wrong);
  // Every line of the table has the same number of cells.
  std::istringstream lines(table);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line))
    if (!line.empty() && line[0] == '|') {
      EXPECT_EQ(std::count(line.begin(), line.end(), '|'), 8) << line;
      ++rows;
    }
  EXPECT_EQ(rows, 5);  // header, separator, three sizes

  nlohmann::json j = row_json(run, vit);
  EXPECT_EQ(j["bench"], "allreduce");
  EXPECT_EQ(j["backend"], "gloo");
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["bytes"], 1226141600);
  EXPECT_EQ(j["label"], "ViT-L/32 gradients");
  EXPECT_EQ(j["check"], "ok");
  EXPECT_EQ(row_json(run, wrong)["check"], "fail");
  EXPECT_EQ(row_json(run, wrong)["max_abs_error"], 3.0);
  EXPECT_FALSE(j.contains("host_copy_overlap"));

  // The host copy's variant is in the preamble and in every JSON line.
  AllreduceRun host{"nccl+host-copy", "cuda", 2, DType::kBF16, 20, 5};
  host.pieces = 13;
  host.host_copy_reduce_beside = true;
  const std::string preamble = markdown_preamble(host);
  EXPECT_NE(preamble.find("each size as 13 all-reduces of consecutive slices"), std::string::npos) << preamble;
  EXPECT_NE(preamble.find("host copy: all-reduces in series, additions beside the copies"), std::string::npos)
      << preamble;
  const nlohmann::json h = row_json(host, ok);
  EXPECT_EQ(h["pieces"], 13);
  EXPECT_EQ(h["host_copy_overlap"], false);
  EXPECT_EQ(h["host_copy_additions"], "beside");
}

TEST(AllreduceBench, PiecesCoverTheBufferInNearlyEqualAlignedSlices) {
  const auto ranges = piece_ranges(1000003, 7);
  ASSERT_EQ(ranges.size(), 7u);
  EXPECT_EQ(ranges.front().first, 0);
  EXPECT_EQ(ranges.back().second, 1000003);
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i > 0) EXPECT_EQ(ranges[i].first, ranges[i - 1].second);
    EXPECT_EQ(ranges[i].first % 64, 0) << i;
    const int64_t size = ranges[i].second - ranges[i].first;
    EXPECT_GE(size, 1000003 / 7 - 64) << i;
    EXPECT_LE(size, 1000003 / 7 + 64) << i;
  }
  EXPECT_EQ(piece_ranges(10, 1), (std::vector<std::pair<int64_t, int64_t>>{{0, 10}}));
  // Too small to align: still every element once, none empty.
  EXPECT_EQ(piece_ranges(5, 5), (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}));
  EXPECT_THROW(piece_ranges(3, 4), Error);
  EXPECT_THROW(piece_ranges(3, 0), Error);
}

// ---- the command, end to end ----

int lines_of(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(AllreduceBenchCli, TwoGlooRanksReportEverySizeAndCheckIt) {
  testing::TrainOutcome o =
      testing::run_train("", "bench allreduce --procs 2 --sizes 4K,3000,1M,1001K --iters 3 --warmup-iters 1");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("over 2 ranks: gloo on cpu, f32"), std::string::npos) << o.out;
  for (const char* size : {"| 2.93 KiB ", "| 4 KiB ", "| 1001 KiB ", "| 1 MiB "})
    EXPECT_NE(o.out.find(size), std::string::npos) << size << "\n" << o.out;
  int ok_rows = 0;
  for (size_t at = o.out.find("| ok |"); at != std::string::npos; at = o.out.find("| ok |", at + 1)) ++ok_rows;
  EXPECT_EQ(ok_rows, 4) << o.out;
  // Only rank 0 reports.
  EXPECT_EQ(o.out.find("all-reduce (sum"), o.out.rfind("all-reduce (sum")) << o.out;
}

TEST(AllreduceBenchCli, Bf16JsonLinesAndOutFile) {
  const auto out = std::filesystem::temp_directory_path() / ("vitddp_allreduce_" + std::to_string(::getpid()) + ".jsonl");
  testing::TrainOutcome o = testing::run_train(
      "", "bench allreduce --procs 2 --dtype bf16 --sizes 2K,64K --iters 2 --warmup-iters 0 --json --out " + out.string());
  ASSERT_EQ(o.code, 0) << o.out;
  std::ifstream in(out);
  std::string file((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(file, o.out);  // stdout holds exactly the JSON lines, as the file does
  std::istringstream lines(o.out);
  std::string line;
  std::vector<int64_t> bytes;
  while (std::getline(lines, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["backend"], "gloo");
    EXPECT_EQ(j["dtype"], "bf16");
    EXPECT_EQ(j["world_size"], 2);
    EXPECT_EQ(j["check"], "ok");
    EXPECT_GT(j["time_us"].get<double>(), 0.0);
    EXPECT_GT(j["busbw_gbps"].get<double>(), 0.0);
    bytes.push_back(j["bytes"]);
  }
  EXPECT_EQ(bytes, (std::vector<int64_t>{2048, 65536}));
  std::filesystem::remove(out);
}

// The JSON lines of a `bench allreduce ... --json` run that must succeed.
std::vector<nlohmann::json> json_rows(const std::string& args) {
  const testing::TrainOutcome o = testing::run_train("", "bench allreduce " + args + " --json");
  EXPECT_EQ(o.code, 0) << o.out;
  std::vector<nlohmann::json> rows;
  std::istringstream lines(o.out);
  for (std::string line; o.code == 0 && std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

TEST(AllreduceBenchCli, AverageOverTwoGlooRanksIsChecked) {
  const auto rows = json_rows("--procs 2 --op avg --sizes 4K,1M --iters 2 --warmup-iters 1");
  EXPECT_EQ(rows.size(), 2u);
  for (const nlohmann::json& j : rows) {
    EXPECT_EQ(j["op"], "avg");
    EXPECT_EQ(j["check"], "ok");
  }
}

TEST(AllreduceBenchCli, PiecesAreAllReducedBackToBackAndChecked) {
  const auto rows = json_rows("--procs 2 --pieces 5 --sizes 4K,1001K --iters 2 --warmup-iters 1");
  EXPECT_EQ(rows.size(), 2u);
  for (const nlohmann::json& j : rows) {
    EXPECT_EQ(j["pieces"], 5);
    EXPECT_EQ(j["check"], "ok");  // every slice summed, none twice
  }
  testing::TrainOutcome table = testing::run_train("", "bench allreduce --procs 2 --pieces 3 --sizes 4K --iters 1");
  ASSERT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("each size as 3 all-reduces of consecutive slices"), std::string::npos) << table.out;
}

TEST(AllreduceBenchCli, OneProcessWithoutFlagsRunsOnTheCpu) {
  testing::TrainOutcome o = testing::run_train("", "bench allreduce --min-bytes 1K --max-bytes 4K --iters 2");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("one rank"), std::string::npos) << o.out;
  for (const char* size : {"| 1 KiB ", "| 2 KiB ", "| 4 KiB "}) EXPECT_NE(o.out.find(size), std::string::npos) << o.out;
}

TEST(AllreduceBenchCli, BadFlagsAreOneLineAndExitTwo) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--no-such-flag", "--no-such-flag"},
      {"--dtype f16", "--dtype must be f32 or bf16"},
      {"--op max", "--op must be sum or avg"},
      {"--sizes 1X", "--sizes: '1X' is not a size"},
      {"--sizes 1001", "size 1001 B is not a whole number of f32 elements"},
      {"--dtype bf16 --sizes 3", "size 3 B is not a whole number of bf16 elements"},
      {"--sizes 1M --max-bytes 4M", "--sizes excludes --min-bytes and --max-bytes"},
      {"--min-bytes 8M --max-bytes 4M", "--min-bytes"},
      {"--iters 0", "--iters must be in [1, 1000000], got 0"},
      {"--iters abc", "--iters"},
      {"--warmup-iters -1", "--warmup-iters must be in [0, 1000000], got -1"},
      {"--timeout 0", "--timeout must be in [0.001, 1e7] seconds"},
      {"--timeout 1e10", "--timeout must be in [0.001, 1e7] seconds"},
      {"--procs 5000", "--procs must be in [0, 1024], got 5000"},
      {"--pieces 0", "--pieces must be in [1, 4096], got 0"},
      {"--procs 2 --host-copy-overlap", "--host-copy-overlap needs --host-copy"},
      {"--procs 2 --host-copy-reduce-beside", "--host-copy-reduce-beside needs --host-copy"},
      {"--sizes 8 --pieces 3", "--pieces 3: a size of 2 elements cannot be cut into 3 slices"},
      {"--gpus 2 --procs 2", "--gpus and --procs exclude each other"},
      {"--gpus 2", "--gpus"},
      {"--procs 2 --out /nonexistent-dir/x.jsonl --sizes 4K", "--out: cannot write '/nonexistent-dir/x.jsonl'"},
  };
  for (const auto& [args, expected] : cases) {
    testing::TrainOutcome o = testing::run_train("", "bench allreduce " + args);
    EXPECT_EQ(o.code, 2) << args << ": " << o.out;
    EXPECT_NE(o.out.find(expected), std::string::npos) << args << ": " << o.out;
    EXPECT_EQ(lines_of(o.out), 1) << args << ": " << o.out;
  }
}

}  // namespace
}  // namespace vitddp::bench
