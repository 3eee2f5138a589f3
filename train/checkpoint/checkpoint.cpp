// Checkpoint files: writing them crash-safely, finding the newest whole one, and reading one
// back with every field checked. The layout is described in checkpoint.h, the record
// (rank-R.json) in checkpoint_record.h.
#include "framework/core/message_text.h"
#include "train/checkpoint/checkpoint.h"

#include "train/checkpoint/checkpoint_record.h"
#include "train/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <filesystem>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <ostream>
#include <set>
#include <thread>

#include "framework/core/error.h"
#include "framework/io/atomic_file.h"
#include "framework/io/file_util.h"

namespace vitddp {

namespace {

std::string quote(const std::string& text, size_t max_len = 80) { return quote_for_message(text, max_len); }

constexpr const char* kWeightsPrefix = "weights.";
constexpr const char* kOptimPrefix = "optim.";
constexpr const char* kPowerSgdPrefix = "powersgd.b";

// ---------------------------------------------------------------------------------------------
// Names

// The step of a folder called "step-<digits>", or -1.
int64_t parse_step_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// Step folders under `dir`, newest first.
std::vector<std::pair<int64_t, std::string>> step_folders(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> steps;
  for (const std::string& name : list_directory(dir)) {
    int64_t step = parse_step_name(name);
    if (step >= 0 && is_directory(join_path(dir, name))) steps.emplace_back(step, join_path(dir, name));
  }
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return steps;
}

// ---------------------------------------------------------------------------------------------
// Saving

std::string powersgd_name(size_t index, const char* part) {
  return kPowerSgdPrefix + std::to_string(index) + "." + part;
}


// VITDDP_TEST_PAUSE_IN_SAVE: unset or "0": never; "step:N": only in the save of step N (so a
// test can let earlier saves finish); anything else: in every save.
bool pause_requested(int64_t step) {
  const char* v = std::getenv("VITDDP_TEST_PAUSE_IN_SAVE");
  if (!v || !*v || std::string(v) == "0") return false;
  const std::string value(v);
  if (value.rfind("step:", 0) == 0) return value.substr(5) == std::to_string(step);
  return true;
}

struct Written {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

// Streams the tensors into an AtomicFileWriter, computing the size and CRC on the way.
Written write_tensors_file(const std::string& path, const NamedTensors& tensors,
                           const std::map<std::string, std::string>& metadata, bool pause) {
  uint64_t data_bytes = 0;
  for (const auto& [name, t] : tensors) data_bytes += t.nbytes();
  AtomicFileWriter file(path);
  Written w;
  uint32_t crc = 0;
  uint64_t pause_at = UINT64_MAX;  // set once the header's size is known
  stream_safetensors(
      tensors,
      [&](const char* data, size_t n) {
        if (pause && pause_at == UINT64_MAX) pause_at = (n + data_bytes) / 2;
        crc = crc32(data, n, crc);
        if (w.bytes < pause_at && w.bytes + n >= pause_at) {
          const size_t first = static_cast<size_t>(pause_at - w.bytes);
          file.write(data, first);
          std::fprintf(stderr, "VITDDP_TEST_PAUSE_IN_SAVE: paused after %llu of %llu bytes of %s\n",
                       static_cast<unsigned long long>(pause_at), static_cast<unsigned long long>(pause_at * 2),
                       file.tmp_path().c_str());
          std::fflush(stderr);
          std::this_thread::sleep_for(std::chrono::seconds(30));
          file.write(data + first, n - first);
        } else {
          file.write(data, n);
        }
        w.bytes += n;
      },
      metadata);
  file.commit();
  w.crc = crc;
  return w;
}

bool is_temp_of_rank(const std::string& name, int rank) {
  return name.rfind("rank-" + std::to_string(rank) + ".", 0) == 0 && name.find(".tmp.") != std::string::npos;
}

// Note [A folder of some ranks]
// A folder of checkpoints normally holds every rank's files. A node's memory checkpoints hold
// only its own ranks' (distributed/launcher.h): its RANKS file lists them, one per line, and a
// step there is whole, kept and loadable when those ranks' records are present. Without RANKS:
// every rank of the world.
std::vector<int> ranks_kept_in(const std::string& dir, int world_size) {
  std::vector<int> ranks;
  const std::string list = join_path(dir, "RANKS");
  if (exists(list)) {
    std::ifstream in(list);
    for (int r; in >> r;)
      if (r >= 0 && r < world_size) ranks.push_back(r);
    return ranks;
  }
  for (int r = 0; r < world_size; ++r) ranks.push_back(r);
  return ranks;
}

// Whether every rank's record of `step_dir` is present and sound (parses, passes its own CRC):
// the step completed everywhere, for retention and LATEST. A damaged record does not count, so
// retention keeps an older step in its place. Whole-ness proper also checks the tensors' CRC
// (find_latest_checkpoint), which would read every tensors file at every save.
bool all_records_sound(const std::string& step_dir, int world_size) {
  for (int r : ranks_kept_in(parent_of(step_dir), world_size)) {
    const std::string record = join_path(step_dir, rank_file(r, ".json"));
    if (!exists(record)) return false;
    try {
      (void)parse_record(record);
    } catch (const Error&) {
      return false;
    }
  }
  return true;
}

// Removes this rank's files in `step_dir` (the record first, so a half-removed step is never taken
// for whole), then the folder if that left it empty.
void remove_rank_files(const std::string& step_dir, int rank) {
  ::unlink(join_path(step_dir, rank_file(rank, ".json")).c_str());
  ::unlink(join_path(step_dir, rank_file(rank, ".safetensors")).c_str());
  for (const std::string& name : list_directory(step_dir))
    if (is_temp_of_rank(name, rank)) ::unlink(join_path(step_dir, name).c_str());
  ::rmdir(step_dir.c_str());  // fails while other ranks' files remain: they remove their own
}

// See Note [Checkpoint retention]. Returns the newest step <= `step` whole on every rank (-1: none),
// the one LATEST names.
int64_t apply_retention(const std::string& dir, int64_t step, int rank, int world_size, int keep) {
  int whole = 0;
  int64_t newest_kept = -1, oldest_kept = -1;
  for (const auto& [s, path] : step_folders(dir)) {
    if (s > step || whole >= keep || !all_records_sound(path, world_size)) continue;
    if (whole == 0) newest_kept = s;
    ++whole;
    oldest_kept = s;
  }
  for (const auto& [s, path] : step_folders(dir)) {
    if (s > step || (whole >= keep && s < oldest_kept)) {
      remove_rank_files(path, rank);
    } else {
      for (const std::string& name : list_directory(path))  // temp files of earlier, killed saves
        if (is_temp_of_rank(name, rank)) ::unlink(join_path(path, name).c_str());
    }
  }
  fsync_directory(dir);
  return newest_kept;
}

// ---------------------------------------------------------------------------------------------
// Checking

// Why `rank`'s files in `step_dir` are not a whole checkpoint, or "" when they are.
std::string whole_problem(const std::string& step_dir, int rank) {
  const std::string record_path = join_path(step_dir, rank_file(rank, ".json"));
  try {
    if (!exists(record_path)) {
      // A run with more ranks than the checkpoint: hand the step to load_checkpoint to refuse.
      const std::string first = join_path(step_dir, rank_file(0, ".json"));
      if (rank > 0 && exists(first) && parse_record(first).world_size <= rank) return "";
      return rank_file(rank, ".json") + " is missing (the save did not complete)";
    }
    CheckpointRecord rec = parse_record(record_path);
    for (int r : ranks_kept_in(parent_of(step_dir), rec.world_size))
      if (!exists(join_path(step_dir, rank_file(r, ".json"))))
        return rank_file(r, ".json") + " is missing (rank " + std::to_string(r) + "'s save did not complete)";
    const std::string tensors_path = join_path(step_dir, rec.tensors_file);
    if (!exists(tensors_path)) return rec.tensors_file + " is missing";
    const uint64_t size = file_size(tensors_path);
    if (size != rec.tensors_bytes)
      return rec.tensors_file + " is " + std::to_string(size) + " bytes, its record says " +
             std::to_string(rec.tensors_bytes);
    const std::string crc = hex32(file_crc32(tensors_path));
    if (crc != rec.tensors_crc32)
      return rec.tensors_file + " fails its checksum (CRC-32 " + crc + ", the record says " + rec.tensors_crc32 + ")";
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string describe(const Tensor& t) { return std::string(safetensors_dtype_name(t.dtype())) + shape_str(t.shape()); }

// `got` (from the checkpoint) against `want` (this run): the same names, in order, with the same
// shapes and dtypes. Throws naming the differences.
void check_tensors_match(const std::string& path, const char* what, const NamedTensors& got, const NamedTensors& want) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : got) by_name[name] = &t;
  std::vector<std::string> problems;
  std::set<std::string> wanted;
  int missing = 0;
  for (const auto& [name, t] : want) {
    wanted.insert(name);
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      if (missing++ < 3) problems.push_back(std::string(what) + " " + quote(name) + " is missing");
      continue;
    }
    if (it->second->dtype() != t.dtype() || it->second->shape() != t.shape())
      problems.push_back(std::string(what) + " " + quote(name) + " is " + describe(*it->second) +
                         " in the checkpoint but " + describe(t) + " in this run");
  }
  if (missing > 3) problems.push_back(std::to_string(missing - 3) + " more missing");
  int unexpected = 0;
  for (const auto& [name, t] : got)
    if (!wanted.count(name) && unexpected++ < 3)
      problems.push_back("unexpected " + std::string(what) + " " + quote(name) + " (not in this run)");
  if (problems.empty()) return;
  std::string message;
  for (size_t i = 0; i < problems.size() && i < 6; ++i) message += (i ? "; " : "") + problems[i];
  if (problems.size() > 6) message += "; and more";
  throw Error(path + ": " + message);
}

}  // namespace

// Note [Checkpoint write order]
// Each rank writes its tensors file (temp, fsync, rename, fsync folder) and only then its record
// (the same), so a record on disk means the tensors it describes were whole and durable when it
// was written. A crash at any point leaves, at worst, temp files and a tensors file without a
// record in the step being saved: find_latest_checkpoint skips that step and the previous one is
// untouched, because nothing of an older step is deleted until the new step is complete on every
// rank (Note [Checkpoint retention]). Re-saving a step that already has a record removes the
// record first, so the old record never vouches for a new, half-written tensors file. The CRC-32
// in the record catches what the order cannot: later damage (a bit flip, a truncated copy).

// Note [Checkpoint retention]
// A rank deletes only its own files (so ranks never race on a file). After its save of step S it
// keeps the `keep` newest steps <= S whose records are present and sound (they parse and pass
// their CRC) for every rank, and any step newer than the oldest of those; it deletes older steps,
// and steps > S (a run resumed from an earlier step abandons those), and its temp files left by
// killed saves. A step another rank has not finished yet, or one whose record was damaged, is
// therefore never the reason an older one goes: with keep = 1 the previous step stays until every
// rank has finished the new one.

std::string checkpoint_step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%06lld", static_cast<long long>(step));
  return buf;
}

int64_t checkpoint_step_of(const std::string& step_dir) { return parse_step_name(base_name(step_dir)); }

std::string save_checkpoint(const std::string& dir, const CheckpointState& state, const CheckpointOptions& options) {
  VITDDP_CHECK(!dir.empty(), "save_checkpoint: empty checkpoint folder");
  VITDDP_CHECK(options.keep >= 1, "save_checkpoint: keep must be >= 1, got ", options.keep);
  VITDDP_CHECK(state.step >= 0, "save_checkpoint: step must be >= 0, got ", state.step);
  VITDDP_CHECK(state.world_size >= 1 && state.rank >= 0 && state.rank < state.world_size, "save_checkpoint: rank ",
               state.rank, " of world size ", state.world_size, " is impossible");
  VITDDP_CHECK(state.loader_step >= 0 && state.optimizer_steps >= 0,
               "save_checkpoint: negative loader or optimizer step");
  make_directories(dir);
  const std::string step_dir = join_path(dir, checkpoint_step_name(state.step));
  if (::mkdir(step_dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw Error(step_dir + ": cannot create folder: " + errno_text(errno));
  fsync_directory(dir);

  // See Note [Checkpoint write order].
  const std::string record_path = join_path(step_dir, rank_file(state.rank, ".json"));
  if (exists(record_path)) {
    if (::unlink(record_path.c_str()) != 0) throw Error(record_path + ": cannot replace: " + errno_text(errno));
    fsync_directory(step_dir);
  }
  const std::string tensors_file = rank_file(state.rank, ".safetensors");
  const std::map<std::string, std::string> metadata = {
      {"format", kCheckpointFormat}, {"step", std::to_string(state.step)}, {"rank", std::to_string(state.rank)}};
  Written w = write_tensors_file(join_path(step_dir, tensors_file), checkpoint_tensors(state), metadata,
                                 pause_requested(state.step));
  write_file_atomically(record_path, record_text(state, tensors_file, w.bytes, w.crc));

  const int64_t newest = apply_retention(dir, state.step, state.rank, state.world_size, options.keep);
  if (state.rank == 0 && newest >= 0)
    write_file_atomically(join_path(dir, "LATEST"), checkpoint_step_name(newest) + "\n");
  return step_dir;
}

std::vector<std::string> resume_setting_changes(const nlohmann::json& saved, const nlohmann::json& now) {
  std::vector<std::string> changes;
  if (!saved.is_object() || !now.is_object()) return changes;
  auto compare = [&](const char* key, const std::string& why) {
    if (!saved.contains(key) || !now.contains(key) || saved[key] == now[key]) return;
    changes.push_back((is_public_flag(key) ? "--" : "") + std::string(key) + " " + saved[key].dump() + " -> " +
                      now[key].dump() + why);
  };
  for (const char* key : {"seed", "data", "dataset-size", "batch-size", "accumulate", "precision", "image-size",
                          "dropout", "bucket-mb", "first-bucket-mb", "early-bucket-mb", "tail-bucket-mb", "lr",
                          "lr-schedule", "warmup-steps", "warmup-decay", "min-lr", "lr-step-size", "lr-gamma",
                          "weight-decay", "weight-decay-all", "label-smoothing", "clip-grad-norm", "model-ema",
                          "mixup-alpha", "cutmix-alpha"})
    compare(key, "");
  // A cosine or step schedule is laid out over the run's steps: more steps stretch it.
  if (now.contains("lr-schedule") && now["lr-schedule"] != "constant")
    compare("steps", " (the " + now["lr-schedule"].get<std::string>() + " schedule follows --steps)");
  return changes;
}

void check_checkpoint_dir(const std::string& dir, bool resume) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  VITDDP_CHECK(!ec && is_directory(dir), "--checkpoint-dir ", dir, ": cannot make the folder (",
               ec ? ec.message() : std::string("a file of that name is in the way"), ")");
  if (resume) return;
  const std::vector<std::pair<int64_t, std::string>> steps = step_folders(dir);
  VITDDP_CHECK(steps.empty(), "--checkpoint-dir ", dir, " already holds checkpoints (newest: step ", steps.front().first,
               "); pass --resume to continue that run, or choose an empty folder: a new run's first save would "
               "delete them");
}

std::optional<std::string> find_latest_checkpoint(const std::string& dir, int rank, std::ostream& log) {
  const auto steps = step_folders(dir);
  if (steps.empty()) return std::nullopt;
  std::string problems;
  for (const auto& [step, path] : steps) {
    std::string problem = whole_problem(path, rank);
    if (problem.empty()) return path;
    // One write: every rank may say it at once on a shared stderr.
    log << ("warning: skipping checkpoint " + path + ": " + problem + "\n") << std::flush;
    problems += (problems.empty() ? "" : "; ") + base_name(path) + ": " + problem;
  }
  throw Error("no whole checkpoint for rank " + std::to_string(rank) + " in " + dir + " (" + problems + ")");
}

CheckpointState load_checkpoint(const std::string& step_dir, int rank, const CheckpointExpectations& expect) {
  const int64_t dir_step = parse_step_name(base_name(step_dir));
  VITDDP_CHECK(dir_step >= 0, step_dir, ": not a checkpoint step folder (expected a name like step-000120)");
  VITDDP_CHECK(is_directory(step_dir), step_dir, ": no such checkpoint folder");
  const std::string record_path = join_path(step_dir, rank_file(rank, ".json"));
  if (!exists(record_path)) {
    // Name the world-size mismatch when that is the reason (a run with more ranks).
    const std::string first = join_path(step_dir, rank_file(0, ".json"));
    if (rank > 0 && exists(first)) {
      CheckpointRecord rec0 = parse_record(first);
      VITDDP_CHECK(rec0.world_size == expect.world_size, first, ": checkpoint was saved by ", rec0.world_size,
                   " ranks, this run has ", expect.world_size, " (resume with the same world size)");
    }
    throw Error(record_path + ": missing: rank " + std::to_string(rank) +
                "'s save of this step did not complete; resume from an earlier step");
  }
  CheckpointRecord rec = parse_record(record_path);
  auto fail = [&](const std::string& path, const std::string& message) { throw Error(path + ": " + message); };
  if (rec.rank != rank)
    fail(record_path, "the record is rank " + std::to_string(rec.rank) + "'s, not rank " + std::to_string(rank) + "'s");
  if (rec.step != dir_step)
    fail(record_path, "the record is of step " + std::to_string(rec.step) + " but lies in " + base_name(step_dir));
  if (rec.model_name != expect.model_name || rec.parameter_count != expect.parameter_count)
    fail(record_path, "checkpoint is " + rec.model_name + " (" + std::to_string(rec.parameter_count) +
                          " parameters), this run is " + expect.model_name + " (" +
                          std::to_string(expect.parameter_count) + ")");
  if (rec.world_size != expect.world_size)
    fail(record_path, "checkpoint was saved by " + std::to_string(rec.world_size) + " ranks, this run has " +
                          std::to_string(expect.world_size) + " (resume with the same world size)");
  for (int r : ranks_kept_in(parent_of(step_dir), rec.world_size)) {
    const std::string other = join_path(step_dir, rank_file(r, ".json"));
    if (!exists(other))
      fail(other, "missing: rank " + std::to_string(r) +
                      "'s save of this step did not complete; resume from an "
                      "earlier step");
  }
  if (rec.optimizer_name != expect.optimizer_name)
    fail(record_path, "checkpoint's optimizer is " + rec.optimizer_name + ", this run's is " + expect.optimizer_name);
  if (rec.has_powersgd != expect.powersgd)
    fail(record_path, rec.has_powersgd ? "checkpoint holds PowerSGD state but this run's hook is not PowerSGD"
                                       : "checkpoint holds no PowerSGD state but this run's hook is PowerSGD");

  // The tensors file: size, checksum, then the format and every tensor.
  const std::string tensors_path = join_path(step_dir, rec.tensors_file);
  if (!exists(tensors_path)) fail(tensors_path, "missing (its record " + record_path + " is present)");
  const uint64_t size = file_size(tensors_path);
  if (size != rec.tensors_bytes)
    fail(tensors_path, "file is " + std::to_string(size) + " bytes but its record says " +
                           std::to_string(rec.tensors_bytes) + (size < rec.tensors_bytes ? " (truncated)" : ""));
  const std::string crc = hex32(file_crc32(tensors_path));
  if (crc != rec.tensors_crc32)
    fail(tensors_path, "checksum mismatch: CRC-32 is " + crc + " but its record says " + rec.tensors_crc32 +
                           " (the file is damaged)");
  SafetensorsFile file = read_safetensors(tensors_path);

  CheckpointState state;
  state.step = rec.step;
  state.config = rec.config;
  state.model_name = rec.model_name;
  state.parameter_count = rec.parameter_count;
  state.world_size = rec.world_size;
  state.rank = rec.rank;
  state.dropout_seed = rec.dropout_seed;
  state.dropout_counter = rec.dropout_counter;
  state.loader_step = rec.loader_step;
  state.buckets = rec.buckets;
  state.optimizer_name = rec.optimizer_name;
  state.optimizer_steps = rec.optimizer_steps;
  std::map<size_t, CheckpointRecord::PsgdBucket> listed;
  if (rec.has_powersgd) {
    state.powersgd.emplace();
    state.powersgd->iter = rec.powersgd_iter;
    for (const auto& b : rec.powersgd_buckets) {
      listed[b.index] = b;
      state.powersgd->buckets[b.index];
    }
  }
  auto starts_with = [](const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; };
  for (auto& [name, t] : file.tensors) {
    if (starts_with(name, kWeightsPrefix)) {
      state.weights.emplace_back(name.substr(std::strlen(kWeightsPrefix)), std::move(t));
    } else if (starts_with(name, kOptimPrefix)) {
      state.optimizer_state.emplace_back(name.substr(std::strlen(kOptimPrefix)), std::move(t));
    } else if (starts_with(name, kPowerSgdPrefix) && rec.has_powersgd) {
      // "powersgd.b<index>.error", ".q" or ".sent_p", for a bucket the record lists with that part.
      const std::string rest = name.substr(std::strlen(kPowerSgdPrefix));
      const size_t dot = rest.find('.');
      const std::string digits = rest.substr(0, dot);
      const std::string part = dot == std::string::npos ? "" : rest.substr(dot + 1);
      bool ok = !digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos;
      const size_t index = ok ? static_cast<size_t>(std::stoul(digits)) : 0;
      auto it = listed.find(index);
      ok = ok && it != listed.end() &&
           ((part == "error" && it->second.error) || (part == "q" && it->second.q) ||
            (part == "sent_p" && it->second.sent_p));
      if (!ok) fail(tensors_path, "unexpected tensor " + quote(name) + " (not in the record's PowerSGD buckets)");
      // The error may be 16-bit (--powersgd-error-dtype bucket); Q and the sent P are always f32.
      const bool dtype_ok = t.dtype() == DType::kF32 ||
                            (part == "error" && (t.dtype() == DType::kBF16 || t.dtype() == DType::kF16));
      if (!dtype_ok || t.dim() != 1)
        fail(tensors_path, "PowerSGD tensor " + quote(name) + " is " + describe(t) + ", expected 1-D F32" +
                               (part == "error" ? " (or BF16/F16 for an error)" : ""));
      PowerSgdState::Bucket& b = state.powersgd->buckets[index];
      (part == "error" ? b.error : part == "q" ? b.q : b.sent_p) = std::move(t);
    } else {
      fail(tensors_path, "unexpected tensor " + quote(name) +
                             " (checkpoint tensors are named weights.*, optim.* or powersgd.b<i>.error|q|sent_p)");
    }
  }
  if (state.powersgd)
    for (const auto& [index, b] : listed) {
      const PowerSgdState::Bucket& got = state.powersgd->buckets[index];
      const char* missing = b.error && !got.error.defined() ? "error"
                            : b.q && !got.q.defined()         ? "q"
                            : b.sent_p && !got.sent_p.defined() ? "sent_p"
                                                                : nullptr;
      if (missing)
        fail(tensors_path, "PowerSGD bucket " + std::to_string(index) + "'s " + missing +
                               " tensor is missing (the record lists it)");
    }
  check_tensors_match(tensors_path, "weight", state.weights, expect.weights);
  check_tensors_match(tensors_path, "optimizer state", state.optimizer_state, expect.optimizer_state);
  if (parameter_signature(state.weights) != rec.param_signature)
    fail(tensors_path, "its weights do not match the record's parameter signature " + quote(rec.param_signature));
  return state;
}

void restore_tensors(const NamedTensors& saved, const NamedTensors& targets, const std::string& what) {
  SafetensorsFile file;
  file.tensors = saved;
  load_named_tensors(file, targets, what);
}

PowerSgdState powersgd_state_on(const PowerSgdState& saved, Device device) {
  PowerSgdState out;
  out.iter = saved.iter;
  for (const auto& [index, b] : saved.buckets) {
    PowerSgdState::Bucket& o = out.buckets[index];
    if (b.error.defined()) o.error = b.error.to(device).clone();
    if (b.q.defined()) o.q = b.q.to(device).clone();
    if (b.sent_p.defined()) o.sent_p = b.sent_p.to(device).clone();
  }
  return out;
}

void for_each_checkpoint_tensor(CheckpointState& s, const std::function<void(const std::string&, Tensor&)>& f) {
  for (auto& [name, t] : s.weights) f(kWeightsPrefix + name, t);
  for (auto& [name, t] : s.optimizer_state) f(kOptimPrefix + name, t);
  if (s.powersgd)
    for (auto& [index, b] : s.powersgd->buckets) {
      if (b.error.defined()) f(powersgd_name(index, "error"), b.error);
      if (b.q.defined()) f(powersgd_name(index, "q"), b.q);
      if (b.sent_p.defined()) f(powersgd_name(index, "sent_p"), b.sent_p);
    }
}

NamedTensors checkpoint_tensors(const CheckpointState& s) {
  CheckpointState handles = s;  // the same tensors: a Tensor is a handle
  NamedTensors out;
  for_each_checkpoint_tensor(handles, [&](const std::string& name, Tensor& t) { out.emplace_back(name, t); });
  return out;
}

}  // namespace vitddp
