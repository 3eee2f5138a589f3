// Checkpoints: bit-exact round trip, exact resume of a small training run (dropout, loader,
// SGD/AdamW state, PowerSGD error feedback and Q), fallback past a damaged newest checkpoint,
// a process killed in the middle of a save, retention, and a corpus of bad files that must each
// give one clear vitddp::Error. The corpus is generated here from a good checkpoint.
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_record.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/fake_group.h"
#include "common/multiprocess.h"
#include "common/test_utils.h"
#include "data/loader.h"
#include "data/synthetic_dataset.h"
#include "framework/ops/cross_entropy.h"
#include "framework/optim/optimizer.h"
#include "models/vit/vit.h"
#include "train/batch_source.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempFolder;
using testing::throws_with;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ha = a.to(Device::cpu()).contiguous(), hb = b.to(Device::cpu()).contiguous();
  return std::memcmp(ha.data_ptr(), hb.data_ptr(), ha.nbytes()) == 0;
}

::testing::AssertionResult same_named(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " tensors";
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return ::testing::AssertionFailure() << a[i].first << " vs " << b[i].first;
    if (!same_bytes(a[i].second, b[i].second)) return ::testing::AssertionFailure() << a[i].first << " differs";
  }
  return ::testing::AssertionSuccess();
}

Tensor filled(const Shape& shape, Generator& gen) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  fill_normal(t, gen, 0.0, 1.0);
  return t;
}

// A small state with every kind of content: weights, optimizer state, PowerSGD buckets with
// both, one, or neither tensor.
CheckpointState small_state(int64_t step, int rank = 0, int world = 1, bool powersgd = true) {
  Generator gen(1234 + static_cast<uint64_t>(step) * 10 + static_cast<uint64_t>(rank));
  CheckpointState s;
  s.step = step;
  s.config = json{{"lr", 0.1}, {"model", "test_model"}, {"seed", 18446744073709551615ull}};
  s.model_name = "test_model";
  s.parameter_count = 17;
  s.world_size = world;
  s.rank = rank;
  s.dropout_seed = 0xFEDCBA9876543210ull;
  s.dropout_counter = 1000 + static_cast<uint64_t>(step);
  s.loader_step = step * 2;
  s.optimizer_name = "sgd";
  s.optimizer_steps = step;
  s.weights = {{"a.weight", filled({3, 4}, gen)}, {"b.bias", filled({5}, gen)}};
  s.optimizer_state = {{"momentum_buffer", filled({17}, gen)}};
  s.buckets = {{1}, {0}};
  if (powersgd) {
    s.powersgd.emplace();
    s.powersgd->iter = step + 3;
    s.powersgd->buckets[0] = {filled({12}, gen), filled({6}, gen)};
    s.powersgd->buckets[0].sent_p = filled({4}, gen);  // an error settled a step late
    s.powersgd->buckets[1] = {filled({5}, gen), Tensor()};
    s.powersgd->buckets[4] = {};
  }
  return s;
}

CheckpointExpectations expectations_for(const CheckpointState& s) {
  CheckpointExpectations e;
  e.model_name = s.model_name;
  e.parameter_count = s.parameter_count;
  e.world_size = s.world_size;
  e.weights = s.weights;
  e.optimizer_name = s.optimizer_name;
  e.optimizer_state = s.optimizer_state;
  e.powersgd = s.powersgd.has_value();
  return e;
}

std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::recursive_directory_iterator(dir)) out.push_back(fs::relative(e.path(), dir).string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Checkpoint, Crc32MatchesZlib) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);  // the standard check value
  EXPECT_EQ(crc32("", 0), 0u);
  std::string text = "The quick brown fox jumps over the lazy dog, and then some more bytes.";
  EXPECT_EQ(crc32(text.data(), text.size()), 0xa2ce687au);  // zlib.crc32 of the same bytes
  for (size_t split = 0; split <= text.size(); ++split)
    EXPECT_EQ(crc32(text.data() + split, text.size() - split, crc32(text.data(), split)),
              crc32(text.data(), text.size()));
}

TEST(Checkpoint, RoundTripIsBitExact) {
  TempFolder tmp("vitddp_ckpt");
  CheckpointState s = small_state(120);
  // Values that must survive bit for bit: NaN payloads, -0, denormals, infinities.
  float* w = s.weights[0].second.data<float>();
  const uint32_t odd_bits[] = {0x7fc00001u, 0x80000000u, 0x00000001u, 0x7f800000u, 0xff800000u};
  for (int i = 0; i < 5; ++i) std::memcpy(&w[i], &odd_bits[i], 4);
  const std::string step_dir = save_checkpoint(tmp.path(), s);
  EXPECT_EQ(step_dir, tmp.path() + "/step-000120");
  EXPECT_EQ(checkpoint_step_of(step_dir), 120);
  EXPECT_EQ(checkpoint_step_of(step_dir + "/"), 120);
  EXPECT_EQ(checkpoint_step_of(tmp.path()), -1);
  EXPECT_EQ(checkpoint_step_name(1234567), "step-1234567");
  EXPECT_EQ(files_under(tmp.path()), (std::vector<std::string>{"LATEST", "step-000120", "step-000120/rank-0.json",
                                                               "step-000120/rank-0.safetensors"}));
  EXPECT_EQ(read_bytes(tmp.path() + "/LATEST"), "step-000120\n");

  std::ostringstream log;
  std::optional<std::string> found = find_latest_checkpoint(tmp.path(), 0, log);
  ASSERT_TRUE(found);
  EXPECT_EQ(*found, step_dir);
  EXPECT_EQ(log.str(), "");
  CheckpointState back = load_checkpoint(*found, 0, expectations_for(s));
  EXPECT_EQ(back.step, s.step);
  EXPECT_EQ(back.config, s.config);
  EXPECT_EQ(back.model_name, s.model_name);
  EXPECT_EQ(back.parameter_count, s.parameter_count);
  EXPECT_EQ(back.world_size, 1);
  EXPECT_EQ(back.rank, 0);
  EXPECT_EQ(back.dropout_seed, s.dropout_seed);
  EXPECT_EQ(back.dropout_counter, s.dropout_counter);
  EXPECT_EQ(back.loader_step, s.loader_step);
  EXPECT_EQ(back.buckets, s.buckets);
  EXPECT_EQ(back.optimizer_name, s.optimizer_name);
  EXPECT_EQ(back.optimizer_steps, s.optimizer_steps);
  EXPECT_TRUE(same_named(back.weights, s.weights));
  EXPECT_TRUE(same_named(back.optimizer_state, s.optimizer_state));
  ASSERT_TRUE(back.powersgd);
  EXPECT_EQ(back.powersgd->iter, s.powersgd->iter);
  ASSERT_EQ(back.powersgd->buckets.size(), 3u);
  for (const auto& [index, b] : s.powersgd->buckets) {
    const PowerSgdState::Bucket& got = back.powersgd->buckets.at(index);
    EXPECT_EQ(got.error.defined(), b.error.defined()) << index;
    EXPECT_EQ(got.q.defined(), b.q.defined()) << index;
    EXPECT_EQ(got.sent_p.defined(), b.sent_p.defined()) << index;
    if (b.error.defined()) EXPECT_TRUE(same_bytes(got.error, b.error)) << index;
    if (b.q.defined()) EXPECT_TRUE(same_bytes(got.q, b.q)) << index;
    if (b.sent_p.defined()) EXPECT_TRUE(same_bytes(got.sent_p, b.sent_p)) << index;
  }

  // Into existing tensors (as the trainer restores the arena and the optimizer).
  NamedTensors targets = {{"a.weight", Tensor::zeros({3, 4})}, {"b.bias", Tensor::zeros({5})}};
  restore_tensors(back.weights, targets, "weights");
  EXPECT_TRUE(same_named(targets, s.weights));
  PowerSgdState on = powersgd_state_on(*back.powersgd, Device::cpu());
  EXPECT_TRUE(same_bytes(on.buckets.at(0).q, s.powersgd->buckets.at(0).q));
  EXPECT_TRUE(same_bytes(on.buckets.at(0).sent_p, s.powersgd->buckets.at(0).sent_p));
  EXPECT_FALSE(on.buckets.at(4).error.defined());

  // Without PowerSGD the record says so, and the run must not expect it.
  TempFolder tmp2("vitddp_ckpt");
  CheckpointState plain = small_state(3, 0, 1, /*powersgd=*/false);
  load_checkpoint(save_checkpoint(tmp2.path(), plain), 0, expectations_for(plain));
}

TEST(Checkpoint, NoStepFoldersMeansNoCheckpoint) {
  TempFolder tmp("vitddp_ckpt");
  std::ostringstream log;
  EXPECT_FALSE(find_latest_checkpoint(tmp.path(), 0, log));
  EXPECT_FALSE(find_latest_checkpoint(tmp.path() + "/does-not-exist", 0, log));
  fs::create_directories(tmp.path() + "/not-a-step");
  EXPECT_FALSE(find_latest_checkpoint(tmp.path(), 0, log));
}

TEST(Checkpoint, RetentionKeepsTheLastK) {
  TempFolder tmp("vitddp_ckpt");
  for (int64_t step : {10, 20, 30, 40}) save_checkpoint(tmp.path(), small_state(step));
  EXPECT_EQ(
      files_under(tmp.path()),
      (std::vector<std::string>{"LATEST", "step-000030", "step-000030/rank-0.json", "step-000030/rank-0.safetensors",
                                "step-000040", "step-000040/rank-0.json", "step-000040/rank-0.safetensors"}));
  save_checkpoint(tmp.path(), small_state(50), CheckpointOptions{1});
  EXPECT_EQ(files_under(tmp.path()), (std::vector<std::string>{"LATEST", "step-000050", "step-000050/rank-0.json",
                                                               "step-000050/rank-0.safetensors"}));
  EXPECT_EQ(read_bytes(tmp.path() + "/LATEST"), "step-000050\n");
  // A run resumed from an earlier step abandons the later ones.
  save_checkpoint(tmp.path(), small_state(30), CheckpointOptions{2});
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-000050"));
  EXPECT_EQ(read_bytes(tmp.path() + "/LATEST"), "step-000030\n");
}

TEST(Checkpoint, RetentionWaitsForEveryRank) {
  // Two ranks, keep 1: rank 0 finishing step 2 first must not delete its step 1, because rank 1
  // may still die in its save of step 2, leaving step 1 the only step whole on both.
  TempFolder tmp("vitddp_ckpt");
  CheckpointOptions keep1{1};
  save_checkpoint(tmp.path(), small_state(1, 0, 2), keep1);
  save_checkpoint(tmp.path(), small_state(1, 1, 2), keep1);
  save_checkpoint(tmp.path(), small_state(2, 0, 2), keep1);
  EXPECT_TRUE(fs::exists(tmp.path() + "/step-000001/rank-0.json"));
  EXPECT_EQ(read_bytes(tmp.path() + "/LATEST"), "step-000001\n");
  std::ostringstream log;
  // Rank 1 has no step 2 yet: both ranks' newest whole step is 1 (rank 0 reports why it skips 2).
  EXPECT_EQ(*find_latest_checkpoint(tmp.path(), 0, log), tmp.path() + "/step-000001");
  EXPECT_NE(log.str().find("rank-1.json is missing"), std::string::npos) << log.str();
  EXPECT_EQ(*find_latest_checkpoint(tmp.path(), 1, log), tmp.path() + "/step-000001");
  save_checkpoint(tmp.path(), small_state(2, 1, 2), keep1);
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-000001/rank-1.json"));
  EXPECT_TRUE(fs::exists(tmp.path() + "/step-000001/rank-0.json"));  // rank 0 removes it at its next save
  save_checkpoint(tmp.path(), small_state(3, 0, 2), keep1);
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-000001"));
  EXPECT_EQ(*find_latest_checkpoint(tmp.path(), 0, log), tmp.path() + "/step-000002");
}

TEST(Checkpoint, DamagedNewestFallsBackToThePreviousOne) {
  TempFolder tmp("vitddp_ckpt");
  save_checkpoint(tmp.path(), small_state(1));
  save_checkpoint(tmp.path(), small_state(2));
  const std::string newest = tmp.path() + "/step-000002/rank-0.safetensors";
  std::string bytes = read_bytes(newest);
  bytes[bytes.size() - 3] ^= 0x10;
  write_bytes(newest, bytes);

  std::ostringstream log;
  std::optional<std::string> found = find_latest_checkpoint(tmp.path(), 0, log);
  ASSERT_TRUE(found);
  EXPECT_EQ(*found, tmp.path() + "/step-000001");
  EXPECT_EQ(
      log.str(),
      "warning: skipping checkpoint " + tmp.path() + "/step-000002: rank-0.safetensors fails its checksum (CRC-32 " +
          [&] {
            char buf[16];
            std::snprintf(buf, sizeof(buf), "%08x", file_crc32(newest));
            return std::string(buf);
          }() +
          ", the record says " +
          json::parse(read_bytes(tmp.path() + "/step-000002/rank-0.json"))["tensors"]["crc32"].get<std::string>() +
          ")\n");
  CheckpointState s1 = small_state(1);
  CheckpointState back = load_checkpoint(*found, 0, expectations_for(s1));
  EXPECT_TRUE(same_named(back.weights, s1.weights));
  // Loading the damaged one directly names the problem.
  EXPECT_TRUE(throws_with([&] { load_checkpoint(tmp.path() + "/step-000002", 0, expectations_for(s1)); },
                          {newest, "checksum mismatch"}));

  // A record damaged where it still parses (the loader's position, 4 -> 7): it fails its own
  // checksum and is skipped the same way, not resumed from.
  {
    TempFolder tmp2("vitddp_ckpt");
    save_checkpoint(tmp2.path(), small_state(1));
    save_checkpoint(tmp2.path(), small_state(2));
    const std::string record = tmp2.path() + "/step-000002/rank-0.json";
    std::string text = read_bytes(record);
    const size_t at = text.find("\"loader_step\": ");
    ASSERT_NE(at, std::string::npos) << text;
    text[at + 15] = text[at + 15] == '7' ? '8' : '7';
    write_bytes(record, text);
    std::ostringstream log2;
    EXPECT_EQ(*find_latest_checkpoint(tmp2.path(), 0, log2), tmp2.path() + "/step-000001");
    EXPECT_NE(log2.str().find("warning: skipping checkpoint " + tmp2.path() + "/step-000002: " + record +
                              ": the record fails its checksum"),
              std::string::npos)
        << log2.str();
    EXPECT_TRUE(throws_with([&] { load_checkpoint(tmp2.path() + "/step-000002", 0, expectations_for(small_state(2))); },
                            {record, "the record fails its checksum", "the file is damaged"}));
  }

  // A missing record (a save that never finished) is skipped the same way.
  fs::remove(tmp.path() + "/step-000002/rank-0.json");
  log.str("");
  EXPECT_EQ(*find_latest_checkpoint(tmp.path(), 0, log), tmp.path() + "/step-000001");
  EXPECT_NE(log.str().find("rank-0.json is missing (the save did not complete)"), std::string::npos);

  // Nothing whole at all: an error naming each step's problem.
  write_bytes(tmp.path() + "/step-000001/rank-0.json", "{");
  EXPECT_TRUE(throws_with([&] { find_latest_checkpoint(tmp.path(), 0, log); },
                          {"no whole checkpoint for rank 0 in " + tmp.path(), "step-000002: rank-0.json is missing",
                           "step-000001: " + tmp.path() + "/step-000001/rank-0.json: malformed JSON"}));
}

// Note [A folder of some ranks]: a node's memory checkpoints hold only its ranks' files, which
// its RANKS file lists; a step is whole there with those ranks' records, and loads.
TEST(Checkpoint, AFolderOfSomeRanksHoldsWholeSteps) {
  TempFolder tmp("vitddp_ckpt_ranks");
  write_bytes(tmp.path() + "/RANKS", "1\n");
  CheckpointState s = small_state(1);
  s.world_size = 2;
  s.rank = 1;
  save_checkpoint(tmp.path(), s);
  s.step = 2;
  save_checkpoint(tmp.path(), s);
  s.step = 3;
  save_checkpoint(tmp.path(), s);  // keep 2: step 1 goes, as rank 0's files are not expected here
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-000001"));
  std::ostringstream log;
  EXPECT_EQ(*find_latest_checkpoint(tmp.path(), 1, log), tmp.path() + "/step-000003");
  EXPECT_EQ(log.str(), "");
  CheckpointExpectations expect = expectations_for(s);
  expect.world_size = 2;
  CheckpointState back = load_checkpoint(tmp.path() + "/step-000003", 1, expect);
  EXPECT_EQ(back.step, 3);
  EXPECT_TRUE(same_named(back.weights, s.weights));
  // Without RANKS the folder needs rank 0's record too.
  fs::remove(tmp.path() + "/RANKS");
  EXPECT_TRUE(throws_with([&] { find_latest_checkpoint(tmp.path(), 1, log); }, {"rank-0.json is missing"}));
}

// A step whose record is damaged does not count towards retention's `keep`: the older whole step
// stays, so a resume still has one to fall back to.
TEST(Checkpoint, RetentionDoesNotCountADamagedStep) {
  TempFolder tmp("vitddp_ckpt");
  save_checkpoint(tmp.path(), small_state(1));
  save_checkpoint(tmp.path(), small_state(2));
  write_bytes(tmp.path() + "/step-000002/rank-0.json", "{\"damaged\": true}");
  save_checkpoint(tmp.path(), small_state(3));  // keep 2: steps 3 and 1 are the whole ones
  EXPECT_TRUE(fs::exists(tmp.path() + "/step-000001/rank-0.json"));
  EXPECT_TRUE(fs::exists(tmp.path() + "/step-000003/rank-0.json"));
  fs::remove(tmp.path() + "/step-000003/rank-0.json");  // the newest lost too
  std::ostringstream log;
  EXPECT_EQ(*find_latest_checkpoint(tmp.path(), 0, log), tmp.path() + "/step-000001");
}

// Note [Killing a save]
// The child saves with VITDDP_TEST_PAUSE_IN_SAVE set, which makes it stop halfway through the
// tensors temp file and say so on stderr; the parent reads that line from a pipe and kills the
// child with SIGKILL there, the worst moment: a half-written file on disk.
TEST(Checkpoint, KilledDuringSaveLeavesThePreviousCheckpointWhole) {
  TempFolder tmp("vitddp_ckpt");
  save_checkpoint(tmp.path(), small_state(1));
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], 2);
    ::setenv("VITDDP_TEST_PAUSE_IN_SAVE", "1", 1);
    try {
      save_checkpoint(tmp.path(), small_state(2));
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);  // not reached in time: the parent kills it in the pause
  }
  ::close(fds[1]);
  std::string said;
  char buf[256];
  ssize_t n;
  while (said.find('\n') == std::string::npos && (n = ::read(fds[0], buf, sizeof(buf))) > 0) said.append(buf, n);
  ::close(fds[0]);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_NE(said.find("VITDDP_TEST_PAUSE_IN_SAVE: paused after"), std::string::npos) << said;
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child finished its save: " << said;

  // What the kill left: a half-written temp file and no record for step 2.
  const std::string tmp_file =
      tmp.path() + "/step-000002/rank-0.safetensors.tmp." + std::to_string(static_cast<long>(child));
  ASSERT_TRUE(fs::exists(tmp_file)) << said;
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-000002/rank-0.json"));
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-000002/rank-0.safetensors"));
  EXPECT_EQ(read_bytes(tmp.path() + "/LATEST"), "step-000001\n");

  std::ostringstream log;
  std::optional<std::string> found = find_latest_checkpoint(tmp.path(), 0, log);
  ASSERT_TRUE(found);
  EXPECT_EQ(*found, tmp.path() + "/step-000001");
  EXPECT_NE(log.str().find("step-000002: rank-0.json is missing"), std::string::npos) << log.str();
  CheckpointState s1 = small_state(1);
  EXPECT_TRUE(same_named(load_checkpoint(*found, 0, expectations_for(s1)).weights, s1.weights));

  // The resumed run saves step 2 again: the temp file is cleaned up and step 2 is whole.
  save_checkpoint(tmp.path(), small_state(2));
  EXPECT_FALSE(fs::exists(tmp_file));
  log.str("");
  EXPECT_EQ(*find_latest_checkpoint(tmp.path(), 0, log), tmp.path() + "/step-000002");
  EXPECT_EQ(log.str(), "");
}

// ---------------------------------------------------------------------------------------------
// Exact resume of a small training run

enum class Opt { kSgd, kAdamW };

// One rank of a tiny data-parallel run with everything a checkpoint must carry: dropout (a
// Generator), a loader that crosses epochs, optimizer state, and PowerSGD with error feedback
// and warm-started Q over a fake two-rank group.
struct MiniRun {
  static VitConfig model_config() {
    VitConfig c;
    c.name = "mini";
    c.image_size = 8;
    c.patch_size = 4;
    c.num_layers = 1;
    c.num_heads = 2;
    c.hidden_dim = 8;
    c.mlp_dim = 16;
    c.num_classes = 3;
    c.dropout = 0.2;
    return c;
  }
  static SamplerOptions sampler_options() {
    SamplerOptions o;
    o.dataset_size = 20;  // 5 batches of 4 per epoch
    o.seed = 5;
    return o;
  }
  static PowerSgdOptions powersgd_options() {
    PowerSgdOptions o;
    o.start_iter = 1;
    o.min_compression_rate = 1.0;
    return o;
  }

  MiniRun(Opt opt, int64_t start_step)
      : model(model_config(), 7),
        arena(model.named_parameters(), Device::cpu()),
        optimizer(opt == Opt::kSgd ? make_sgd(arena, SgdConfig{0.05, 0.9, 0.01})
                                   : make_adamw(arena, AdamWConfig{0.01, 0.9, 0.999, 1e-8, 0.01})),
        hook(powersgd_options()),
        dataset(20, 3, 8, 8, 3, 11),
        loader(dataset, DistributedSampler(sampler_options()), LoaderOptions{4, 1, 2, false, start_step, {}}) {
    bucket.index = 0;
    bucket.buffer = arena.flat_grads();
    for (size_t i = 0; i < arena.size(); ++i) {
      bucket.params.push_back(i);
      bucket.offsets.push_back(arena.offset_of(i));
      bucket.shapes.push_back(arena.named_params()[i].second.shape());
    }
    bucket.is_last = true;
  }

  void step() {
    arena.zero_grad();
    Batch batch = loader.next();
    Tensor loss = cross_entropy(model.forward(batch.images), batch.labels);
    loss.backward();
    hook.run(group, bucket)->wait();
    optimizer->step();
    ++steps;
  }

  CheckpointState state() {
    CheckpointState s;
    s.step = steps;
    s.config = json{{"test", "MiniRun"}};
    s.model_name = model.config().name;
    s.parameter_count = arena.numel();
    s.world_size = 1;  // one process: the fake group's second rank is a closed form
    s.rank = 0;
    s.dropout_seed = model.dropout_generator().seed();
    s.dropout_counter = model.dropout_generator().counter();
    s.loader_step = steps;
    s.optimizer_name = optimizer->name();
    s.optimizer_steps = optimizer->step_count();
    s.weights = arena.master_views();
    s.optimizer_state = optimizer->state();
    s.powersgd = hook.state();
    return s;
  }

  CheckpointExpectations expectations() const {
    CheckpointExpectations e;
    e.model_name = model.config().name;
    e.parameter_count = arena.numel();
    e.world_size = 1;
    e.weights = arena.master_views();
    e.optimizer_name = optimizer->name();
    e.optimizer_state = optimizer->state();
    e.powersgd = true;
    return e;
  }

  // What the trainer does after load_checkpoint (the loader was built with start_step).
  void restore(const CheckpointState& s, bool dropout_rng = true) {
    restore_tensors(s.weights, arena.master_views(), "weights");
    restore_tensors(s.optimizer_state, optimizer->state(), "optimizer state");
    optimizer->set_step_count(s.optimizer_steps);
    if (dropout_rng) model.dropout_generator() = Generator(s.dropout_seed, s.dropout_counter);
    hook.state() = powersgd_state_on(*s.powersgd, arena.device());
    steps = s.step;
  }

  VisionTransformer model;
  ParamArena arena;
  std::unique_ptr<Optimizer> optimizer;
  PowerSgdHook hook;
  testing::FakeGroup group;
  SyntheticDataset dataset;
  DataLoader loader;
  GradBucket bucket;
  int64_t steps = 0;
};

class CheckpointResume : public ::testing::TestWithParam<Opt> {};

TEST_P(CheckpointResume, IsBitExact) {
  const int64_t n = 4, m = 4;  // resumes inside the first epoch and runs into the second
  MiniRun straight(GetParam(), 0);
  for (int64_t i = 0; i < n + m; ++i) straight.step();

  TempFolder tmp("vitddp_ckpt");
  {
    MiniRun first(GetParam(), 0);
    for (int64_t i = 0; i < n; ++i) first.step();
    save_checkpoint(tmp.path(), first.state());
  }
  std::ostringstream log;
  const std::string step_dir = *find_latest_checkpoint(tmp.path(), 0, log);
  MiniRun probe(GetParam(), 0);
  CheckpointState saved = load_checkpoint(step_dir, 0, probe.expectations());
  ASSERT_EQ(saved.step, n);
  ASSERT_GT(saved.dropout_counter, 0u);  // dropout drew numbers: its state matters

  MiniRun resumed(GetParam(), saved.loader_step);
  resumed.restore(saved);
  for (int64_t i = 0; i < m; ++i) resumed.step();
  EXPECT_TRUE(same_bytes(resumed.arena.flat_master(), straight.arena.flat_master()));
  EXPECT_TRUE(same_named(resumed.optimizer->state(), straight.optimizer->state()));
  EXPECT_EQ(resumed.optimizer->step_count(), straight.optimizer->step_count());
  EXPECT_EQ(resumed.model.dropout_generator().counter(), straight.model.dropout_generator().counter());
  EXPECT_EQ(resumed.hook.state().iter, straight.hook.state().iter);
  EXPECT_TRUE(same_bytes(resumed.hook.state().buckets.at(0).error, straight.hook.state().buckets.at(0).error));
  EXPECT_TRUE(same_bytes(resumed.hook.state().buckets.at(0).q, straight.hook.state().buckets.at(0).q));
  ASSERT_TRUE(straight.hook.state().buckets.at(0).sent_p.defined());  // the passes settle the error late
  EXPECT_TRUE(same_bytes(resumed.hook.state().buckets.at(0).sent_p, straight.hook.state().buckets.at(0).sent_p));

  // The test can tell: leaving out the dropout RNG state changes the weights.
  MiniRun careless(GetParam(), saved.loader_step);
  careless.restore(saved, /*dropout_rng=*/false);
  for (int64_t i = 0; i < m; ++i) careless.step();
  EXPECT_FALSE(same_bytes(careless.arena.flat_master(), straight.arena.flat_master()));
}

TEST(Checkpoint, BatchSourceResumesAtItsStartStep) {
  SyntheticDataset dataset(20, 3, 8, 8, 3, 11);
  auto sampler = std::make_shared<DistributedSampler>(MiniRun::sampler_options());
  BatchSourceOptions o;
  o.device = Device::cpu();
  o.batch_size = 4;
  o.workers = 1;
  std::unique_ptr<BatchSource> straight = make_batch_source(&dataset, sampler, o);
  for (int i = 0; i < 7; ++i) straight->next();
  o.start_step = 7;
  std::unique_ptr<BatchSource> resumed = make_batch_source(&dataset, sampler, o);
  for (int i = 0; i < 4; ++i) {
    Batch a = straight->next(), b = resumed->next();
    EXPECT_EQ(b.step, 7 + i);
    EXPECT_TRUE(same_bytes(a.images, b.images));
    EXPECT_TRUE(same_bytes(a.labels, b.labels));
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CheckpointResume, ::testing::Values(Opt::kSgd, Opt::kAdamW),
                         [](const auto& info) { return info.param == Opt::kSgd ? "Sgd" : "AdamW"; });

// ---------------------------------------------------------------------------------------------
// A corpus of bad checkpoints

struct BadCase {
  std::string name;
  // Damages the good two-rank checkpoint in `step_dir` and/or the expectations.
  std::function<void(const std::string& step_dir, CheckpointExpectations& expect)> damage;
  std::vector<std::string> message;  // parts the one-line error must contain
};

json read_record(const std::string& step_dir) { return json::parse(read_bytes(step_dir + "/rank-0.json")); }
void write_record(const std::string& step_dir, const json& j) { write_bytes(step_dir + "/rank-0.json", j.dump(2)); }
// Edits the record and reseals it (its record_crc32 made right for the new fields), so the
// reader must find the edited field's problem itself.
void edit_record(const std::string& step_dir, const std::function<void(json&)>& edit) {
  json j = read_record(step_dir);
  edit(j);
  if (j.contains("record_crc32")) j["record_crc32"] = record_fields_crc32(j.dump());
  write_record(step_dir, j);
}
// After editing the tensors file on purpose: make the record vouch for it again, so the reader
// must find the problem inside the file itself.
void vouch_for_tensors(const std::string& step_dir) {
  const std::string path = step_dir + "/rank-0.safetensors";
  edit_record(step_dir, [&](json& j) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%08x", file_crc32(path));
    j["tensors"]["crc32"] = buf;
    j["tensors"]["bytes"] = fs::file_size(path);
  });
}
// Rewrites the tensors file with `edit` applied to its tensors, keeping the record consistent.
void rewrite_tensors(const std::string& step_dir, const std::function<void(NamedTensors&)>& edit) {
  const std::string path = step_dir + "/rank-0.safetensors";
  SafetensorsFile f = read_safetensors(path);
  edit(f.tensors);
  write_safetensors(path, f.tensors);
  vouch_for_tensors(step_dir);
}
// Replaces the first occurrence of `from` in the tensors file's JSON header (same length).
void patch_header(const std::string& step_dir, const std::string& from, const std::string& to) {
  const std::string path = step_dir + "/rank-0.safetensors";
  std::string bytes = read_bytes(path);
  size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  ASSERT_EQ(from.size(), to.size());
  bytes.replace(at, from.size(), to);
  write_bytes(path, bytes);
  vouch_for_tensors(step_dir);
}

std::vector<BadCase> bad_cases() {
  auto tensors = [](const std::string& d) { return d + "/rank-0.safetensors"; };
  auto record = [](const std::string& d) { return d + "/rank-0.json"; };
  using E = CheckpointExpectations;
  std::vector<BadCase> cases = {
      {"truncated_tensors",
       [&](const std::string& d, E&) {
         std::string b = read_bytes(tensors(d));
         write_bytes(tensors(d), b.substr(0, b.size() - 10));
       },
       {"rank-0.safetensors: file is", "bytes but its record says", "(truncated)"}},
      {"empty_tensors",
       [&](const std::string& d, E&) { write_bytes(tensors(d), ""); },
       {"rank-0.safetensors: file is 0 bytes", "(truncated)"}},
      {"bitflip_tensor_data",
       [&](const std::string& d, E&) {
         std::string b = read_bytes(tensors(d));
         b[b.size() - 5] ^= 0x01;
         write_bytes(tensors(d), b);
       },
       {"rank-0.safetensors: checksum mismatch: CRC-32 is", "(the file is damaged)"}},
      {"bitflip_tensor_header",
       [&](const std::string& d, E&) {
         std::string b = read_bytes(tensors(d));
         b[20] ^= 0x40;
         write_bytes(tensors(d), b);
       },
       {"rank-0.safetensors: checksum mismatch"}},
      {"tensors_missing",
       [&](const std::string& d, E&) { fs::remove(tensors(d)); },
       {"rank-0.safetensors: missing (its record", "rank-0.json is present)"}},
      {"record_wrong_checksum",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["tensors"]["crc32"] = "00000000"; }); },
       {"rank-0.safetensors: checksum mismatch", "its record says 00000000"}},
      {"record_checksum_not_hex",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["tensors"]["crc32"] = "xyz"; }); },
       {"rank-0.json: field 'tensors.crc32' must be 8 lowercase hex digits, got 'xyz'"}},
      {"record_wrong_size",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["tensors"]["bytes"] = 1u << 30; }); },
       {"rank-0.safetensors: file is", "but its record says 1073741824 (truncated)"}},
      {"header_lies_offsets",  // the record vouches for the file, whose header lies about offsets
       [&](const std::string& d, E&) { patch_header(d, "\"data_offsets\":[0,", "\"data_offsets\":[4,"); },
       {"rank-0.safetensors", "data_offsets"}},
      {"header_lies_shape",
       [&](const std::string& d, E&) { patch_header(d, "\"shape\":[3,4]", "\"shape\":[4,4]"); },
       {"rank-0.safetensors", "a.weight"}},
      {"header_bitflip_vouched",
       [&](const std::string& d, E&) { patch_header(d, "{\"__metadata__\"", "[\"__metadata__\""); },
       {"rank-0.safetensors"}},
      {"wrong_dtype",
       [&](const std::string& d, E&) {
         rewrite_tensors(d, [](NamedTensors& t) { t[0].second = t[0].second.to(DType::kF64); });
       },
       {"rank-0.safetensors: weight 'a.weight' is F64[3, 4] in the checkpoint but F32[3, 4] in this run"}},
      {"wrong_shape_expected",
       [&](const std::string&, E& e) {
         e.weights[0].second = Tensor::zeros({4, 3});
       },
       {"rank-0.safetensors: weight 'a.weight' is F32[3, 4] in the checkpoint but F32[4, 3] in this run"}},
      {"missing_weight",
       [&](const std::string& d, E&) { rewrite_tensors(d, [](NamedTensors& t) { t.erase(t.begin()); }); },
       {"rank-0.safetensors: weight 'a.weight' is missing"}},
      {"unknown_tensor",
       [&](const std::string& d, E&) {
         rewrite_tensors(d, [](NamedTensors& t) { t.emplace_back("extra.x", Tensor::zeros({2})); });
       },
       {"rank-0.safetensors: unexpected tensor 'extra.x'"}},
      {"extra_weight",
       [&](const std::string& d, E&) {
         rewrite_tensors(d, [](NamedTensors& t) { t.emplace_back("weights.c.weight", Tensor::zeros({2})); });
       },
       {"rank-0.safetensors: unexpected weight 'c.weight' (not in this run)"}},
      {"powersgd_tensor_unlisted",
       [&](const std::string& d, E&) {
         rewrite_tensors(d, [](NamedTensors& t) { t.emplace_back("powersgd.b1.q", Tensor::zeros({2})); });
       },
       {"rank-0.safetensors: unexpected tensor 'powersgd.b1.q' (not in the record's PowerSGD buckets)"}},
      {"powersgd_tensor_missing",
       [&](const std::string& d, E&) {
         rewrite_tensors(d, [](NamedTensors& t) {
           t.erase(std::remove_if(t.begin(), t.end(), [](const auto& p) { return p.first == "powersgd.b0.q"; }),
                   t.end());
         });
       },
       {"rank-0.safetensors: PowerSGD bucket 0's q tensor is missing"}},
      {"powersgd_sent_p_missing",
       [&](const std::string& d, E&) {
         rewrite_tensors(d, [](NamedTensors& t) {
           t.erase(std::remove_if(t.begin(), t.end(), [](const auto& p) { return p.first == "powersgd.b0.sent_p"; }),
                   t.end());
         });
       },
       {"rank-0.safetensors: PowerSGD bucket 0's sent_p tensor is missing"}},
      {"powersgd_sent_p_unlisted",
       [&](const std::string& d, E&) {
         edit_record(d, [](json& j) { j["powersgd"]["buckets"][0]["sent_p"] = false; });
       },
       {"rank-0.safetensors: unexpected tensor 'powersgd.b0.sent_p' (not in the record's PowerSGD buckets)"}},
      {"powersgd_sent_p_without_q",
       [&](const std::string& d, E&) {
         edit_record(d, [](json& j) { j["powersgd"]["buckets"][0]["q"] = false; });
       },
       {"rank-0.json: PowerSGD bucket 0 lists a sent P without its error and Q"}},
      {"powersgd_sent_p_wrong_dtype",
       [&](const std::string& d, E&) {
         rewrite_tensors(d, [](NamedTensors& t) {
           for (auto& [name, x] : t)
             if (name == "powersgd.b0.sent_p") x = x.to(DType::kBF16);
         });
       },
       {"rank-0.safetensors: PowerSGD tensor 'powersgd.b0.sent_p' is BF16[4], expected 1-D F32"}},
      {"powersgd_wrong_dtype",
       [&](const std::string& d, E&) {
         rewrite_tensors(d, [](NamedTensors& t) {
           for (auto& [name, x] : t)
             if (name == "powersgd.b0.error") x = x.to(DType::kF64);
         });
       },
       {"rank-0.safetensors: PowerSGD tensor 'powersgd.b0.error' is F64[12], expected 1-D F32"}},
      {"json_truncated",
       [&](const std::string& d, E&) {
         std::string b = read_bytes(record(d));
         write_bytes(record(d), b.substr(0, b.size() / 2));
       },
       {"rank-0.json: malformed JSON ("}},
      {"json_empty",
       [&](const std::string& d, E&) { write_bytes(record(d), ""); },
       {"rank-0.json: malformed JSON (empty file)"}},
      {"json_not_object",
       [&](const std::string& d, E&) { write_bytes(record(d), "[1, 2]"); },
       {"rank-0.json: the record must be a JSON object, got array"}},
      {"json_invalid_utf8",
       [&](const std::string& d, E&) { write_bytes(record(d), "{\"step\": \"\xff\xfe\"}"); },
       {"rank-0.json: malformed JSON"}},
      {"json_deeply_nested",
       [&](const std::string& d, E&) { write_bytes(record(d), std::string(100000, '[') + std::string(100000, ']')); },
       {"rank-0.json: the record must be a JSON object, got array"}},
      {"json_bitflip",
       [&](const std::string& d, E&) {
         std::string b = read_bytes(record(d));
         b[0] ^= 0x04;  // '{' -> '\x7f'
         write_bytes(record(d), b);
       },
       {"rank-0.json: malformed JSON"}},
      {"unknown_key",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["extra"] = 1; }); },
       {"rank-0.json: unknown key 'extra' in the record"}},
      {"unknown_nested_key",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["model"]["layers"] = 2; }); },
       {"rank-0.json: unknown key 'model.layers' in the record"}},
      {"missing_field",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j.erase("loader_step"); }); },
       {"rank-0.json: missing field 'loader_step' in the record"}},
      {"missing_nested_field",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["rng"]["dropout"].erase("counter"); }); },
       {"rank-0.json: missing field 'rng.dropout.counter' in the record"}},
      {"wrong_type",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["step"] = "120"; }); },
       {"rank-0.json: field 'step' must be an integer, got string"}},
      {"float_for_integer",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["tensors"]["bytes"] = 1e30; }); },
       {"rank-0.json: field 'tensors.bytes' must be an integer, got number"}},
      {"negative_seed",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["rng"]["dropout"]["seed"] = -1; }); },
       {"rank-0.json: field 'rng.dropout.seed' must be an unsigned integer"}},
      {"negative_loader_step",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["loader_step"] = -4; }); },
       {"rank-0.json: field 'loader_step' must be >= 0, got -4"}},
      {"buckets_not_an_array",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["buckets"] = "0,1"; }); },
       {"rank-0.json: field 'buckets' must be an array, got string"}},
      {"bucket_with_a_negative_index",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["buckets"] = json::array({{1, 0}, {-2}}); }); },
       {"rank-0.json: field 'buckets[1]' holds -2, not a parameter index"}},
      {"empty_bucket",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["buckets"] = json::array({json::array()}); }); },
       {"rank-0.json: field 'buckets[0]' must be a non-empty array of parameter indices"}},
      {"huge_integer",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["step"] = 18446744073709551615ull; }); },
       {"rank-0.json: field 'step' is out of range"}},
      {"incomplete",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["complete"] = false; }); },
       {"rank-0.json: record is marked incomplete"}},
      {"other_format",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["format"] = "pytorch"; }); },
       {"rank-0.json: field 'format' is 'pytorch', expected 'vitddp-checkpoint'"}},
      {"future_version",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["version"] = 99; }); },
       {"rank-0.json: record version 99 is not supported"}},
      {"config_not_object",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["config"] = "x"; }); },
       {"rank-0.json: field 'config' must be a JSON object, got string"}},
      {"tensors_file_elsewhere",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["tensors"]["file"] = "../../etc/passwd"; }); },
       {"rank-0.json: field 'tensors.file' is '../../etc/passwd', expected 'rank-0.safetensors'"}},
      {"record_of_other_rank",
       [&](const std::string& d, E&) {
         edit_record(d, [](json& j) {
           j["rank"] = 1;
           j["tensors"]["file"] = "rank-1.safetensors";
         });
       },
       {"rank-0.json: the record is rank 1's, not rank 0's"}},
      {"record_of_other_step",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["step"] = 7; }); },
       {"rank-0.json: the record is of step 7 but lies in step-000120"}},
      {"rank_not_below_world",
       [&](const std::string& d, E&) { edit_record(d, [](json& j) { j["rank"] = 2; }); },
       {"rank-0.json: field 'rank' 2 is not below 'world_size' 2"}},
      {"wrong_model",
       [&](const std::string&, E& e) {
         e.model_name = "vit_tiny";
         e.parameter_count = 81226;
       },
       {"rank-0.json: checkpoint is test_model (17 parameters), this run is vit_tiny (81226)"}},
      {"wrong_world_size",
       [&](const std::string&, E& e) { e.world_size = 4; },
       {"rank-0.json: checkpoint was saved by 2 ranks, this run has 4 (resume with the same world size)"}},
      {"wrong_optimizer",
       [&](const std::string&, E& e) { e.optimizer_name = "adamw"; },
       {"rank-0.json: checkpoint's optimizer is sgd, this run's is adamw"}},
      {"powersgd_unexpected",
       [&](const std::string&, E& e) { e.powersgd = false; },
       {"rank-0.json: checkpoint holds PowerSGD state but this run's hook is not PowerSGD"}},
      {"other_rank_missing",
       [&](const std::string& d, E&) { fs::remove(d + "/rank-1.json"); },
       {"rank-1.json: missing: rank 1's save of this step did not complete"}},
      {"own_record_missing",
       [&](const std::string& d, E&) { fs::remove(record(d)); },
       {"rank-0.json: missing: rank 0's save of this step did not complete"}},
      {"record_is_a_folder",
       [&](const std::string& d, E&) {
         fs::remove(record(d));
         fs::create_directories(record(d));
       },
       {"rank-0.json: cannot read: not a regular file"}},
  };
  return cases;
}

TEST(Checkpoint, EveryBadInputGivesAClearError) {
  int checked = 0;
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    TempFolder tmp("vitddp_ckpt");
    save_checkpoint(tmp.path(), small_state(120, 1, 2));
    const std::string step_dir = save_checkpoint(tmp.path(), small_state(120, 0, 2));
    CheckpointExpectations expect = expectations_for(small_state(120, 0, 2));
    c.damage(step_dir, expect);
    std::vector<std::string> parts = c.message;
    EXPECT_TRUE(throws_with([&] { load_checkpoint(step_dir, 0, expect); }, parts));
    try {
      load_checkpoint(step_dir, 0, expect);
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
      EXPECT_EQ(what.rfind(step_dir, 0), 0u) << "does not start with the file's path: " << what;
    }
    // Finding the newest checkpoint never crashes either: it skips the step or returns it.
    std::ostringstream log;
    try {
      find_latest_checkpoint(tmp.path(), 0, log);
    } catch (const Error&) {
    }
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

// Records written before the error could be settled late (Note [The error settled a step late])
// list no sent_p: they load, without one.
TEST(Checkpoint, RecordsWithoutASentPLoad) {
  TempFolder tmp("vitddp_ckpt");
  CheckpointState s = small_state(120);
  s.powersgd->buckets[0].sent_p = Tensor();
  const std::string step_dir = save_checkpoint(tmp.path(), s);
  edit_record(step_dir, [](json& j) {
    for (json& b : j["powersgd"]["buckets"]) b.erase("sent_p");
  });
  CheckpointState back = load_checkpoint(step_dir, 0, expectations_for(s));
  ASSERT_TRUE(back.powersgd);
  EXPECT_FALSE(back.powersgd->buckets.at(0).sent_p.defined());
  EXPECT_TRUE(same_bytes(back.powersgd->buckets.at(0).error, s.powersgd->buckets.at(0).error));
}

// Records of version 1 carry no checksum of their own: they still load.
TEST(Checkpoint, VersionOneRecordsLoad) {
  TempFolder tmp("vitddp_ckpt");
  CheckpointState s = small_state(120);
  const std::string step_dir = save_checkpoint(tmp.path(), s);
  json j = read_record(step_dir);
  ASSERT_TRUE(j.contains("record_crc32"));
  j.erase("record_crc32");
  j["version"] = 1;
  write_record(step_dir, j);
  CheckpointState back = load_checkpoint(step_dir, 0, expectations_for(s));
  EXPECT_EQ(back.loader_step, s.loader_step);
  EXPECT_TRUE(same_named(back.weights, s.weights));
  // A version 2 record without one is refused by name.
  j["version"] = 2;
  write_record(step_dir, j);
  EXPECT_TRUE(throws_with([&] { load_checkpoint(step_dir, 0, expectations_for(s)); },
                          {step_dir + "/rank-0.json", "field 'record_crc32' is missing"}));
}

// A resume with other data or step settings is allowed, and each change is named; settings a
// resume may change on purpose (the learning rate) and keys an older record lacks are not.
TEST(Checkpoint, ResumeSettingChangesNameWhatDiffers) {
  const nlohmann::json saved = {{"seed", 1}, {"batch-size", 4}, {"lr", 0.1}, {"data", "synthetic"}};
  EXPECT_TRUE(resume_setting_changes(saved, saved).empty());
  nlohmann::json now = saved;
  now["seed"] = 3;
  now["lr"] = 0.2;
  now["data"] = "learnable";
  now["bucket-mb"] = 100;  // not in the saved record: not compared
  // The learning rate is part of the schedule a resume continues: a change is named too.
  EXPECT_EQ(resume_setting_changes(saved, now),
            (std::vector<std::string>{"--seed 1 -> 3", "--data \"synthetic\" -> \"learnable\"", "--lr 0.1 -> 0.2"}));
  EXPECT_TRUE(resume_setting_changes(nlohmann::json(), now).empty());
  // The bucket layout's settings: a checkpoint restores its own buckets, so a change is named.
  const nlohmann::json buckets = {{"bucket-mb", 25.0}, {"first-bucket-mb", 1.0}, {"tail-bucket-mb", 0.0}};
  nlohmann::json tail = buckets;
  tail["tail-bucket-mb"] = 5.0;
  EXPECT_EQ(resume_setting_changes(buckets, tail), (std::vector<std::string>{"tail-bucket-mb 0.0 -> 5.0"}));
}

TEST(Checkpoint, MoreRanksThanTheCheckpointIsRefusedByName) {
  // A 4-rank run resuming a 2-rank checkpoint: ranks 2 and 3 have no files, and still get the
  // world-size message rather than "missing".
  TempFolder tmp("vitddp_ckpt");
  save_checkpoint(tmp.path(), small_state(8, 0, 2));
  save_checkpoint(tmp.path(), small_state(8, 1, 2));
  CheckpointExpectations expect = expectations_for(small_state(8, 0, 2));
  expect.world_size = 4;
  std::ostringstream log;
  std::optional<std::string> found = find_latest_checkpoint(tmp.path(), 3, log);
  ASSERT_TRUE(found);
  EXPECT_TRUE(throws_with([&] { load_checkpoint(*found, 3, expect); },
                          {"rank-0.json: checkpoint was saved by 2 ranks, this run has 4"}));
  EXPECT_TRUE(throws_with([&] { load_checkpoint(*found, 0, expect); },
                          {"rank-0.json: checkpoint was saved by 2 ranks, this run has 4"}));
  EXPECT_TRUE(throws_with([&] { load_checkpoint(tmp.path(), 0, expect); }, {"not a checkpoint step folder"}));
}

}  // namespace
}  // namespace vitddp
