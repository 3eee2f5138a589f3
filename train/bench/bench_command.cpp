// `train bench --sweep`: runs a sweep file's configurations and writes the comparison table.
// See train/bench/bench_command.h.
#include "train/bench/bench_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "framework/core/error.h"
#include "train/bench/child_process.h"
#include "train/bench/reference.h"
#include "train/bench/sweep.h"
#include "train/bench/table.h"
#include "train/config.h"
#include "train/stop_signal.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/device.h"
#endif

namespace vitddp::bench {
namespace {

namespace fs = std::filesystem;

struct SweepOptions {
  std::string sweep_file;
  std::string out_dir;    // empty: bench-out/<sweep name>
  std::string reference;  // the PyTorch script; empty: no pytorch rows
  double run_timeout = 900;
  bool dry_run = false;
  bool trace = true;      // --trace per run, for the exposed-communication column
  int repeat = 1;         // launches per configuration (Note [Repeated launches])
  std::string command;    // the command line, for the table's header
};

// The flags a sweep run may set: train's own, typed by their defaults ("ddp" included).
SweepSchema train_schema() { return SweepSchema::from_defaults(TrainConfig().to_json()); }

// Checks a run's flags as `train` will: its flag table and TrainConfig::validate().
void check_run_flags(const Sweep& sweep, size_t i) {
  const SweepRun& run = sweep.runs[i];
  std::vector<std::string> args = {"train"};
  for (const std::string& a : run.to_args(is_public_flag)) args.push_back(a);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  TrainConfig config;
  try {
    parse_train_config(static_cast<int>(argv.size()), argv.data(), &config);
  } catch (const Error& e) {
    throw Error(sweep.source + ": runs[" + std::to_string(i) + "] (\"" + run.label + "\"): " + e.what());
  }
}

std::string self_executable() {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  VITDDP_CHECK(n > 0, "train bench: cannot find this program (/proc/self/exe)");
  self[n] = '\0';
  return self;
}

// "DDP 2 GPUs, bf16 hook" -> "ddp-2-gpus-bf16-hook", for log file names.
std::string slug(const std::string& label) {
  std::string out;
  for (char c : label) {
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.size() > 48) out.resize(48);
  return out.empty() ? "run" : out;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// VITDDP_COMMIT, else what git says of the checkout this program was built in (or the current
// folder's), else "unknown".
std::string commit_of(const std::string& self) {
  if (const char* c = std::getenv("VITDDP_COMMIT"); c && *c) return c;
  for (const std::string& dir : {fs::path(self).parent_path().string(), std::string(".")}) {
    ChildOptions git;
    git.argv = {"git", "-C", dir, "describe", "--always", "--dirty", "--abbrev=12"};
    git.stderr_path = "/dev/null";
    git.time_limit = std::chrono::seconds(20);
    try {
      ChildResult r = run_child(git);
      std::string out = r.out.substr(0, r.out.find('\n'));
      if (r.exit_code == 0 && !out.empty()) return out;
    } catch (const Error&) {
    }
  }
  return "unknown";
}

// The GPU the runs used ("NVIDIA H200 (139 GiB) x2"), or "CPU".
std::string device_name(bool used_gpu) {
#if VITDDP_WITH_CUDA
  if (used_gpu) {
    std::vector<std::string> names;
    for (const std::string& d : cuda::describe_devices()) names.push_back(d.substr(d.find(": ") + 2));  // "0: NAME"
    if (!names.empty()) {
      bool same = true;
      for (const std::string& n : names) same = same && n == names[0];
      if (same) return names[0] + (names.size() > 1 ? " x" + std::to_string(names.size()) : "");
      std::string all;
      for (const std::string& n : names) all += (all.empty() ? "" : "; ") + n;
      return all;
    }
  }
#else
  (void)used_gpu;
#endif
  return "CPU";
}

// The last line of `out` that is a JSON object with a throughput: the --json result line.
std::optional<nlohmann::json> result_line(const std::string& out) {
  std::istringstream in(out);
  std::optional<nlohmann::json> found;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("images_per_s") && j["images_per_s"].is_number()) found = j;
  }
  return found;
}

struct Outcome {
  BenchRow row;
  nlohmann::json result;  // the program's JSON line (null when it failed)
  bool stopped = false;   // the sweep was interrupted during this launch
};

Outcome outcome_of(const std::string& label, int gpus, const ChildResult& r, double time_limit) {
  Outcome o;
  o.row.label = label;
  o.row.gpus = gpus;
  auto with_line = [&](std::string what) {
    return r.last_error_line.empty() ? what : what + ": " + r.last_error_line;
  };
  if (r.timed_out) {
    o.row.failure = with_line("timed out after " + std::to_string(static_cast<int64_t>(time_limit)) + " s (--run-timeout)");
  } else if (r.stopped) {
    o.row.failure = "stopped (the sweep was interrupted)";
    o.stopped = true;
  } else if (r.exit_code != 0) {
    o.row.failure = with_line("exit " + std::to_string(r.exit_code));
  } else if (std::optional<nlohmann::json> j = result_line(r.out)) {
    o.result = *j;
    auto number = [&](const char* key) { return o.result.contains(key) && o.result[key].is_number() ? o.result[key].get<double>() : 0.0; };
    o.row.steps_per_s = number("steps_per_s");
    o.row.images_per_s = number("images_per_s");
    o.row.peak_mib = number("peak_mem_mib");
    // Exposed communication comes from the step trace where `train` has one; "n/a" otherwise.
    if (o.result.contains("exposed_comm_ms") && o.result["exposed_comm_ms"].is_number())
      o.row.exposed_comm_ms = o.result["exposed_comm_ms"].get<double>();
    if (o.result.contains("mfu_pct") && o.result["mfu_pct"].is_number()) o.row.mfu_pct = o.result["mfu_pct"].get<double>();
  } else {
    o.row.failure = "exit 0 but no JSON result line on stdout";
  }
  return o;
}

// The reference's utilisation, counted as ours is (the same model, so the same FLOPs per image,
// on the same GPU): its images/s per GPU against our row's FLOPs and peak, when ours had them.
std::optional<double> same_model_utilisation(const nlohmann::json& ours, const BenchRow& theirs) {
  if (!theirs.failure.empty() || !ours.is_object() || theirs.gpus < 1) return std::nullopt;
  auto number = [&](const char* key) {
    return ours.contains(key) && ours[key].is_number() ? ours[key].get<double>() : 0.0;
  };
  const double gflop = number("train_gflop_per_image"), peak = number("gpu_peak_tflops");
  if (gflop <= 0 || peak <= 0) return std::nullopt;
  return 100.0 * theirs.images_per_s / theirs.gpus * gflop * 1e9 / (peak * 1e12);
}

std::string describe(const Outcome& o, double seconds) {
  char buf[160];
  if (!o.row.failure.empty()) return "failed: " + o.row.failure;
  std::snprintf(buf, sizeof(buf), "%.2f steps/s, %.1f images/s, peak %.0f MiB (%.1f s)", o.row.steps_per_s,
                o.row.images_per_s, o.row.peak_mib, seconds);
  return buf;
}

// Note [Repeated launches]
// A 2-GPU row launched again on the same machine with nothing changed can run well apart from
// the last launch: some launches' all-reduces run slower for the whole run (docs/performance.md,
// "Over NVLink, one launch is not a measurement"). One launch per row then says little, so
// `--repeat N` launches every configuration N times, round by round (each round runs all
// configurations once, so that a slow spell of the machine falls on many rows, not on all
// launches of one), and the row is the launch with the median images/s (for even N the lower of
// the two middle ones: no launch's figures are averaged into numbers no launch had). The table
// keeps every launch's steps/s beside it. A row with any failed launch fails, naming the launch:
// a failure is never outvoted. A sweep stopped by a signal keeps what finished: a launch cut
// short counts only where its configuration has no other, so rounds already done still make rows.
Outcome median_launch(std::vector<Outcome> launches) {
  std::vector<Outcome> finished;
  for (const Outcome& o : launches)
    if (!o.stopped) finished.push_back(o);
  if (!finished.empty()) launches = finished;
  for (size_t k = 0; k < launches.size(); ++k)
    if (!launches[k].row.failure.empty()) {
      Outcome failed = launches[k];
      if (launches.size() > 1)
        failed.row.failure = "launch " + std::to_string(k + 1) + " of " + std::to_string(launches.size()) + ": " +
                             failed.row.failure;
      return failed;
    }
  std::vector<BenchRow> rows;
  std::vector<double> steps;
  for (const Outcome& o : launches) {
    rows.push_back(o.row);
    steps.push_back(o.row.steps_per_s);
  }
  Outcome median = launches[median_launch_index(rows)];
  if (launches.size() > 1) median.row.launch_steps_per_s = steps;
  return median;
}

// The accuracy of a run over its launches (each seed, each round), when they evaluated: see
// Note [Accuracy beside speed] in train/bench/accuracy.h.
std::optional<AccuracySummary> accuracy_of(const SweepRun& run, const std::vector<Outcome>& launches) {
  std::vector<std::vector<EvalPoint>> per_seed;
  for (const Outcome& o : launches)
    if (o.row.failure.empty() && !o.stopped && o.result.is_object() && o.result.contains("evals") &&
        o.result["evals"].is_array() && !o.result["evals"].empty())
      per_seed.push_back(evals_of(o.result, run.label));
  if (per_seed.empty()) return std::nullopt;
  return summarize_accuracy(per_seed, run.target);
}

// Note [Speedups beside the reference]
// Every system is measured against its own baseline row: our rows against our "baseline" run,
// the pytorch rows against the reference's run of the same configuration. Speedup and scaling
// efficiency then say how each scales; images/s side by side say which is faster.
std::vector<TableRow> rows_against(const std::vector<BenchRow>& rows, const std::optional<BenchRow>& baseline) {
  if (baseline && baseline->failure.empty() && baseline->images_per_s > 0) return compute_table(rows, *baseline);
  return table_without_baseline(rows);
}

int run_sweep(const SweepOptions& opt) {
  // 1. Everything that can be wrong with the input, before anything runs or is written.
  const Sweep sweep = parse_sweep_file(opt.sweep_file, train_schema());
  for (size_t i = 0; i < sweep.runs.size(); ++i) {
    check_run_flags(sweep, i);
    for (const auto& [flag, value] : sweep.runs[i].flags)
      VITDDP_CHECK(flag != "trace" && flag != "json", sweep.source, ": runs[", i, "] (", sweep.runs[i].label, "): \"",
                   flag, "\" is set by the sweep itself for every run (each run's trace goes beside its log)");
  }
  VITDDP_CHECK(opt.run_timeout > 0, "--run-timeout must be > 0 seconds, got ", opt.run_timeout);
  VITDDP_CHECK(opt.repeat >= 1 && opt.repeat <= 100, "--repeat must be in [1, 100], got ", opt.repeat);
  if (!opt.reference.empty())
    VITDDP_CHECK(fs::is_regular_file(opt.reference), "--reference ", opt.reference, ": no such file");
  const std::string self = self_executable();
  const std::string out_dir = opt.out_dir.empty() ? "bench-out/" + sweep.name : opt.out_dir;
  const nlohmann::json defaults = TrainConfig().to_json();
  const size_t n = sweep.runs.size();
  auto numbered = [&](size_t i) { return "[" + std::to_string(i + 1) + "/" + std::to_string(n) + "] "; };
  // Each run's files: OUT/NN-label.log (stderr), .trace.json (its --trace: exposed communication);
  // with --repeat, OUT/NN-label.rK.* for launch K.
  // A run with "seeds" launches once per seed: OUT/NN-label[.rK].sS.*, with --seed S.
  auto seeds_of = [&](size_t i) {
    const std::vector<int64_t>& seeds = sweep.runs[i].seeds;
    return seeds.empty() ? std::vector<std::optional<int64_t>>{std::nullopt}
                         : std::vector<std::optional<int64_t>>(seeds.begin(), seeds.end());
  };
  auto run_prefix = [&](size_t i, int launch, std::optional<int64_t> seed) {
    return (fs::path(out_dir) / ((i < 9 ? "0" : "") + std::to_string(i + 1) + "-" + slug(sweep.runs[i].label) +
                                 (opt.repeat > 1 ? ".r" + std::to_string(launch + 1) : "") +
                                 (seed ? ".s" + std::to_string(*seed) : "")))
        .string();
  };
  auto train_argv = [&](size_t i, int launch, std::optional<int64_t> seed) {
    std::vector<std::string> argv = {self};
    for (const std::string& a : sweep.runs[i].to_args(is_public_flag)) argv.push_back(a);
    if (seed) {
      argv.push_back("--seed");
      argv.push_back(std::to_string(*seed));
    }
    argv.push_back("--json");
    if (opt.trace) {
      argv.push_back("--trace");
      argv.push_back(run_prefix(i, launch, seed) + ".trace.json");
    }
    return argv;
  };

  if (opt.dry_run) {
    std::cout << "sweep " << sweep.name << " (" << sweep.source << "): " << n << " runs"
              << (opt.repeat > 1 ? ", each launched " + std::to_string(opt.repeat) + " times" : "") << ", baseline \""
              << sweep.runs[sweep.baseline].label << "\", out dir " << out_dir << " (dry run: nothing runs)\n";
    for (size_t i = 0; i < n; ++i) {
      const SweepRun& run = sweep.runs[i];
      std::cout << numbered(i) << run.label << (run.target ? " (target " + run.target->describe() + ")" : "") << "\n";
      for (const std::optional<int64_t>& seed : seeds_of(i))
        std::cout << "  " << shell_command(run.env, train_argv(i, 0, seed)) << "\n";
      if (!opt.reference.empty()) {
        ReferenceCommand ref = reference_command(run, defaults, opt.reference);
        std::cout << "  pytorch: "
                  << (ref.argv.empty() ? "no counterpart (" + ref.no_counterpart + ")" : shell_command(run.env, ref.argv))
                  << "\n";
      }
    }
    return 0;
  }

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  VITDDP_CHECK(!ec, "cannot create the out dir ", out_dir, " (", ec.message(), ")");
  const std::string stem = (fs::path(out_dir) / sweep.name).string();
  const auto limit = std::chrono::seconds(static_cast<int64_t>(opt.run_timeout + 0.5));

  bool with_reference = false;
  if (!opt.reference.empty()) {
    ChildOptions check;
    check.argv = {"python3", "-c", "import torch"};
    check.stderr_path = (fs::path(out_dir) / "torch-check.log").string();
    check.time_limit = std::chrono::seconds(120);
    ChildResult r = run_child(check);
    with_reference = r.exit_code == 0;
    if (!with_reference)
      std::cerr << "note: --reference: python3 cannot import torch (" << r.last_error_line << "); no pytorch rows\n";
  }

  // 2. The runs, one at a time; SIGINT/SIGTERM stop the current one and end the sweep.
  std::optional<StopSignalScope> stop_signals(std::in_place);
  // See Note [Repeated launches]: round by round, every configuration once per round.
  std::vector<std::vector<Outcome>> our_launches(n), their_launches(n);
  bool used_gpu = false;
  std::string torch_version;
  for (int launch = 0; launch < opt.repeat && stop_signal() == 0; ++launch) {
    const std::string round = opt.repeat > 1 ? "round " + std::to_string(launch + 1) + "/" + std::to_string(opt.repeat) + " " : "";
    for (size_t i = 0; i < n && stop_signal() == 0; ++i) {
      const SweepRun& run = sweep.runs[i];
      ChildOptions child;
      std::string prefix;
      for (const std::optional<int64_t>& seed : seeds_of(i)) {
        if (stop_signal() != 0) break;
        prefix = run_prefix(i, launch, seed);
        child = ChildOptions();
        child.argv = train_argv(i, launch, seed);
        child.env = run.env;
        child.stderr_path = prefix + ".log";
        child.time_limit = limit;
        child.stop_request = &stop_signal_flag();
        std::cerr << round << numbered(i) << run.label << (seed ? " (seed " + std::to_string(*seed) + ")" : "")
                  << " ... " << std::flush;
        ChildResult r = run_child(child);
        Outcome o = outcome_of(run.label, run.workers(), r, opt.run_timeout);
        std::cerr << describe(o, r.seconds) << (o.row.failure.empty() ? "" : " (log: " + child.stderr_path + ")")
                  << "\n";
        used_gpu = used_gpu || (o.result.is_object() && o.result.value("device", std::string()).rfind("cuda", 0) == 0);
        our_launches[i].push_back(o);
      }

      if (!with_reference || stop_signal() != 0) continue;
      ReferenceCommand ref = reference_command(run, defaults, opt.reference);
      if (ref.argv.empty()) {
        if (launch == 0) std::cerr << "      pytorch: no counterpart (" << ref.no_counterpart << ")\n";
        continue;
      }
      child.argv = ref.argv;
      child.stderr_path = prefix + ".pytorch.log";
      std::cerr << "      pytorch ... " << std::flush;
      ChildResult r = run_child(child);
      Outcome o = outcome_of(run.label + " (pytorch)", ref.gpus, r, opt.run_timeout);
      std::cerr << describe(o, r.seconds) << (o.row.failure.empty() ? "" : " (log: " + child.stderr_path + ")") << "\n";
      if (o.result.is_object() && o.result.contains("torch") && o.result["torch"].is_string())
        torch_version = o.result["torch"].get<std::string>();
      their_launches[i].push_back(o);
    }
  }
  // A row for every configuration launched at least once (the first round runs them in order, so
  // an interrupted first round leaves out the rest); see Note [Repeated launches].
  std::vector<BenchRow> ours;
  std::vector<std::optional<BenchRow>> theirs;  // per run: the pytorch row, when one ran
  for (size_t i = 0; i < n && !our_launches[i].empty(); ++i) {
    Outcome mine = median_launch(our_launches[i]);
    if (mine.row.failure.empty()) mine.row.accuracy = accuracy_of(sweep.runs[i], our_launches[i]);
    ours.push_back(mine.row);
    theirs.emplace_back();
    if (!their_launches[i].empty()) {
      Outcome other = median_launch(their_launches[i]);
      other.row.mfu_pct = same_model_utilisation(mine.result, other.row);
      theirs.back() = other.row;
    }
  }
  const int stopped_by = stop_signal();
  stop_signals.reset();  // the previous handlers back

  // 3. The table: see Note [Speedups beside the reference].
  const size_t b = sweep.baseline;
  const std::optional<BenchRow> our_baseline = b < ours.size() ? std::optional<BenchRow>(ours[b]) : std::nullopt;
  std::vector<TableRow> our_table = rows_against(ours, our_baseline);
  std::vector<BenchRow> their_rows;
  for (const auto& t : theirs)
    if (t) their_rows.push_back(*t);
  std::vector<TableRow> their_table = rows_against(their_rows, b < theirs.size() ? theirs[b] : std::nullopt);
  std::vector<TableRow> table;
  size_t k = 0;
  for (size_t i = 0; i < our_table.size(); ++i) {
    table.push_back(our_table[i]);
    if (theirs[i]) table.push_back(their_table[k++]);
  }
  size_t failed = 0;
  for (const TableRow& t : table) failed += t.row.failure.empty() ? 0 : 1;

  TableHeader header = {{"sweep", sweep.source}};
  if (!sweep.description.empty()) header.push_back({"description", sweep.description});
  header.push_back({"date", utc_now()});
  header.push_back({"device", device_name(used_gpu)});
  header.push_back({"commit", commit_of(self)});
  header.push_back({"command", opt.command});
  header.push_back({"baseline", "\"" + sweep.runs[b].label + "\" (speedup = images/s over its images/s)"});
  if (opt.repeat > 1)
    header.push_back({"launches", std::to_string(opt.repeat) + " per configuration, round by round; each row is its "
                                  "median launch by images/s (the lower middle one for an even count)"});
  if (!their_rows.empty())
    header.push_back({"pytorch rows", "the reference " + opt.reference +
                                          (torch_version.empty() ? "" : " under PyTorch " + torch_version) +
                                          ", each against its own run of the baseline"});
  header.push_back({"exposed comm", opt.trace ? "from the step trace; n/a where the run did not report it"
                                              : "n/a: runs not traced (--trace=false)"});
  if (std::any_of(ours.begin(), ours.end(), [](const BenchRow& r) { return r.accuracy.has_value(); }))
    header.push_back({"accuracy", "eval top-1 and loss of each seed's last evaluation, median (range) over seeds; to "
                                  "target: the seeds that reached it, median steps and training seconds; \"same\" when "
                                  "the median top-1 lies in the baseline's range over its seeds, \"misses\" when a "
                                  "seed missed the target (Note [Accuracy beside speed])"});
  if (stopped_by != 0)
    header.push_back({"note", "interrupted by signal " + std::to_string(stopped_by) + "; later runs did not run" +
                                  (opt.repeat > 1 ? " (rows from the launches that finished)" : "")});

  BenchRow json_baseline;  // not run (interrupted before it): its label only
  json_baseline.label = sweep.runs[b].label;
  if (our_baseline) json_baseline = *our_baseline;
  std::cout << table_document(sweep.name, table, header) << std::flush;
  std::vector<std::string> paths = write_table_files(stem, sweep.name, table, json_baseline, header);
  std::cerr << "wrote";
  for (const std::string& p : paths) std::cerr << " " << p;
  std::cerr << "\n";
  if (failed > 0) std::cerr << failed << " of " << table.size() << " rows failed; their logs are in " << out_dir << "\n";
  return stopped_by != 0 ? 128 + stopped_by : 0;
}

}  // namespace

int run_bench_command(int argc, char** argv) {
  SweepOptions opt;
  CLI::App app{"train bench: run a sweep of train configurations and write the comparison table"};
  app.set_config();
  app.name("train bench");
  app.add_option("--sweep", opt.sweep_file, "sweep file (configs/sweeps/*.json)")->required();
  app.add_option("--out-dir", opt.out_dir, "folder for the table files and run logs (default bench-out/<sweep name>)");
  app.add_option("--reference", opt.reference,
                 "the PyTorch reference script (torch_ddp_vit.py): each configuration also runs there, as a "
                 "'(pytorch)' row, when python3 imports torch");
  app.add_option("--run-timeout", opt.run_timeout, "wall-clock limit of each run, in seconds")->capture_default_str();
  app.add_flag("--dry-run", opt.dry_run, "print each run's command line and environment, run nothing");
  app.add_option("--repeat", opt.repeat,
                 "launch every configuration N times, round by round; each row is its median launch, with every "
                 "launch's steps/s beside it")
      ->capture_default_str();
  app.add_option("--trace", opt.trace,
                 "trace every run (the exposed-communication column); --trace=false runs them untraced, as "
                 "users run: a traced step also waits for each NCCL collective's enqueue before marking it")
      ->capture_default_str();
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return 0;
  } catch (const CLI::ParseError& e) {
    throw Error(std::string("train bench: ") + e.what());
  }
  for (int i = 0; i < argc; ++i) opt.command += (i ? " " : "") + std::string(i == 0 ? "train" : argv[i]);
  return run_sweep(opt);
}

}  // namespace vitddp::bench
