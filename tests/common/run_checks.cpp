#include "common/run_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include "common/multiprocess.h"
#include "framework/io/safetensors.h"

namespace vitddp::testing {

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

double worst_weight_difference(const std::string& a_path, const std::string& b_path) {
  const SafetensorsFile a = read_safetensors(a_path), b = read_safetensors(b_path);
  EXPECT_EQ(a.tensors.size(), b.tensors.size());
  double worst = 0;
  for (size_t i = 0; i < a.tensors.size() && i < b.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    const std::vector<double> u = a.tensors[i].second.to_vector(), v = b.tensors[i].second.to_vector();
    EXPECT_EQ(u.size(), v.size()) << a.tensors[i].first;
    for (size_t k = 0; k < u.size() && k < v.size(); ++k) worst = std::max(worst, std::abs(u[k] - v[k]));
  }
  return worst;
}

int updates_issued_beside_backward(const std::string& out) {
  const std::string key = "updates in backward: ";
  const size_t at = out.find(key);
  return at == std::string::npos ? -1 : std::stoi(out.substr(at + key.size()));
}

int start_line_buckets(const std::string& out, const std::string& cap) {
  const size_t at = out.find(" buckets of <= " + cap + " MB");
  if (at == std::string::npos) return -1;
  const size_t begin = out.rfind(", ", at) + 2;
  return std::stoi(out.substr(begin, at - begin));
}

TrainOutcome expect_flags_keep_the_bytes(const std::string& args, const std::string& flags, const std::string& folder) {
  TempFolder dir(folder);
  const std::string plain = (dir / "plain.safetensors").string(), flagged = (dir / "flagged.safetensors").string();
  const TrainOutcome a = run_train("", args + " --json --save " + plain);
  EXPECT_EQ(a.code, 0) << a.out;
  TrainOutcome b = run_train("", args + " " + flags + " --json --save " + flagged);
  EXPECT_EQ(b.code, 0) << b.out;
  if (a.code != 0 || b.code != 0) return b;
  EXPECT_GT(file_bytes(plain).size(), 10000u);
  EXPECT_TRUE(file_bytes(plain) == file_bytes(flagged)) << flags << ": the weights differ";
  // The same loss in every step too, to the bit (each step's forward ran on the same weights).
  EXPECT_FALSE(a.json()["losses"].empty()) << a.out;
  EXPECT_EQ(a.json()["losses"], b.json()["losses"]) << b.out;
  return b;
}

void expect_refused_in_one_line(const std::string& args, const std::string& message) {
  const TrainOutcome o = run_train("", args);
  EXPECT_EQ(o.code, 2) << args << ": " << o.out;
  EXPECT_NE(o.out.find(message), std::string::npos) << args << ": " << o.out;
  EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << args << ": " << o.out;
}

TrainOutcome resume_with_flags(const std::string& args, const std::string& flags, const std::string& folder) {
  TempFolder dir(folder);
  const std::string ckpt = (dir / "ckpt").string();
  const TrainOutcome first = run_train("", args + " --steps 2 --checkpoint-dir " + ckpt + " --checkpoint-every 2");
  EXPECT_EQ(first.code, 0) << first.out;
  TrainOutcome resumed = run_train("", args + " --steps 3 --resume --checkpoint-dir " + ckpt + " " + flags);
  EXPECT_EQ(resumed.code, 0) << resumed.out;
  return resumed;
}

TrainOutcome expect_resume_with_more_steps(const std::string& args, int first, int steps, const std::string& folder,
                                           bool use_gpus) {
  TempFolder dir(folder);
  const std::string straight = (dir / "straight.safetensors").string();
  const std::string resumed = (dir / "resumed.safetensors").string(), checkpoints = (dir / "ckpt").string();
  const std::string n = std::to_string(steps), k = std::to_string(first);
  const TrainOutcome a = run_train("", args + " --steps " + n + " --save " + straight, use_gpus, 300);
  EXPECT_EQ(a.code, 0) << a.out;
  const TrainOutcome b =
      run_train("", args + " --steps " + k + " --checkpoint-dir " + checkpoints + " --checkpoint-every " + k, use_gpus,
                300);
  EXPECT_EQ(b.code, 0) << b.out;
  TrainOutcome c = run_train(
      "", args + " --steps " + n + " --resume --checkpoint-dir " + checkpoints + " --save " + resumed + " --json",
      use_gpus, 300);
  EXPECT_EQ(c.code, 0) << c.out;
  if (a.code != 0 || b.code != 0 || c.code != 0) return c;
  EXPECT_EQ(c.json()["first_step"], first + 1) << c.out;
  EXPECT_EQ(c.out.find("warning: resuming"), std::string::npos) << "no setting changed:\n" << c.out;
  EXPECT_GT(file_bytes(straight).size(), 10000u);
  EXPECT_TRUE(file_bytes(straight) == file_bytes(resumed)) << "resumed weights differ from the uninterrupted run";
  return c;
}

TrainOutcome expect_chosen_setting_keeps_the_weights(const std::string& env, const std::string& args,
                                                     const std::string& key, const std::string& chosen,
                                                     const std::string& pin, const std::string& folder) {
  TempFolder dir(folder);
  const std::string a_path = (dir / "chosen.safetensors").string(), b_path = (dir / "pinned.safetensors").string();
  TrainOutcome a = run_train(env, args + " --json --save " + a_path, true, 300);
  EXPECT_EQ(a.code, 0) << a.out;
  const TrainOutcome b = run_train(env, args + " " + pin + " --json --save " + b_path, true, 300);
  EXPECT_EQ(b.code, 0) << b.out;
  if (a.code != 0 || b.code != 0) return a;
  EXPECT_EQ(a.json()["config"][key], chosen) << a.out;
  EXPECT_NE(b.json()["config"][key], chosen) << b.out;
  EXPECT_EQ(worst_weight_difference(a_path, b_path), 0.0) << key;
  return a;
}

void expect_checkpoints_resume_exactly(const std::string& args, const std::string& folder, bool use_gpus) {
  TempFolder dir(folder);
  const std::string straight = (dir / "straight.safetensors").string();
  const std::string resumed = (dir / "resumed.safetensors").string(), checkpoints = (dir / "ckpt").string();
  TrainOutcome a = run_train("", args + " --steps 6 --save " + straight, use_gpus, 300);
  ASSERT_EQ(a.code, 0) << a.out;
  TrainOutcome first =
      run_train("", args + " --steps 4 --checkpoint-dir " + checkpoints + " --checkpoint-every 2", use_gpus, 300);
  ASSERT_EQ(first.code, 0) << first.out;
  TrainOutcome b = run_train(
      "", args + " --steps 6 --resume --checkpoint-dir " + checkpoints + " --save " + resumed + " --json", use_gpus, 300);
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_EQ(b.json()["first_step"], 5) << b.out;  // resumed from the checkpoint of step 4
  EXPECT_GT(file_bytes(straight).size(), 10000u);
  EXPECT_TRUE(file_bytes(straight) == file_bytes(resumed)) << "resumed weights differ from the uninterrupted run";
}

FlagRuns expect_flags_keep_the_weights(const std::string& args, const std::string& flags, const std::string& folder,
                                       int replays) {
  TempFolder dir(folder);
  const std::string plain = (dir / "plain.safetensors").string(), eager = (dir / "eager.safetensors").string(),
                    graphed = (dir / "graph.safetensors").string();
  FlagRuns runs;
  const TrainOutcome a = run_train("", args + " --json --save " + plain, true, 300);
  EXPECT_EQ(a.code, 0) << a.out;
  runs.eager = run_train("", args + " " + flags + " --cuda-graph=false --json --save " + eager, true, 300);
  EXPECT_EQ(runs.eager.code, 0) << runs.eager.out;
  EXPECT_TRUE(runs.eager.json()["cuda_graph_replays"].is_null()) << runs.eager.out;
  runs.graphed = run_train("", args + " " + flags + " --cuda-graph --json --save " + graphed, true, 300);
  EXPECT_EQ(runs.graphed.code, 0) << runs.graphed.out;
  EXPECT_EQ(runs.graphed.json()["cuda_graph_replays"], replays) << runs.graphed.out;
  if (a.code != 0 || runs.eager.code != 0 || runs.graphed.code != 0) return runs;
  EXPECT_EQ(worst_weight_difference(plain, eager), 0.0) << flags;
  EXPECT_EQ(worst_weight_difference(plain, graphed), 0.0) << flags << " --cuda-graph";
  return runs;
}

}  // namespace vitddp::testing
