// The sweep-file parser. See train/bench/sweep.h.
#include "train/bench/sweep.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "framework/core/error.h"

namespace vitddp::bench {
namespace {

using ordered_json = nlohmann::ordered_json;

const char* type_name(FlagType type) {
  switch (type) {
    case FlagType::kBool: return "a boolean";
    case FlagType::kInteger: return "an integer";
    case FlagType::kNumber: return "a number";
    case FlagType::kString: return "a string";
    case FlagType::kAny: return "a boolean, number or string";
  }
  return "a value";
}

bool has_type(const ordered_json& v, FlagType type) {
  switch (type) {
    case FlagType::kBool: return v.is_boolean();
    case FlagType::kInteger: return v.is_number_integer();
    case FlagType::kNumber: return v.is_number();
    case FlagType::kString: return v.is_string();
    case FlagType::kAny: return v.is_boolean() || v.is_number() || v.is_string();
  }
  return false;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  if (!s.empty() && s.back() == ',') parts.push_back("");
  return parts;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// A comma list of names from `allowed` (case-insensitive), optionally excluded with a leading '^',
// as NCCL_ALGO and NCCL_PROTO take them.
bool is_name_list(std::string value, const std::set<std::string>& allowed) {
  if (!value.empty() && value[0] == '^') value.erase(0, 1);
  if (value.empty()) return false;
  for (const std::string& part : split_commas(value))
    if (!allowed.count(upper(part))) return false;
  return true;
}

// Empty when `value` is a whole number in [lo, hi] (at most two digits), else what it should be.
std::string whole_number_problem(const std::string& value, int lo, int hi) {
  return all_digits(value) && value.size() <= 2 && std::stoi(value) >= lo && std::stoi(value) <= hi
             ? ""
             : "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
}

// Empty when `value` is fine for `name`, else what it should be.
std::string env_value_problem(const std::string& name, const std::string& value) {
  if (name == "NCCL_P2P_DISABLE" || name == "NCCL_SHM_DISABLE" || name == "NCCL_NVLS_ENABLE" ||
      name == "NCCL_SHM_USE_CUDA_MEMCPY")  // the last: shared-memory copies by copy engines, not SM threads
    return value == "0" || value == "1" ? "" : "must be \"0\" or \"1\"";
  if (name == "NCCL_ALGO")
    return is_name_list(value, {"RING", "TREE", "COLLNETDIRECT", "COLLNETCHAIN", "NVLS", "NVLSTREE", "PAT"})
               ? ""
               : "must list Ring, Tree, CollnetDirect, CollnetChain, NVLS, NVLSTree or PAT";
  if (name == "NCCL_PROTO")
    return is_name_list(value, {"LL", "LL128", "SIMPLE"}) ? "" : "must list LL, LL128 or Simple";
  if (name == "NCCL_BUFFSIZE")
    return all_digits(value) && value.size() < 13 && std::stoll(value) > 0 ? "" : "must be a positive number of bytes";
  if (name == "NCCL_CTA_POLICY")  // 0 default, 1 efficiency (fewest CTAs that keep speed, NCCL 2.27+), 2 zero (2.28+)
    return value == "0" || value == "1" || value == "2" ? "" : "must be 0 (default), 1 (efficiency) or 2 (zero)";
  if (name == "NCCL_MAX_CTAS" || name == "NCCL_MIN_CTAS")  // thread blocks (SMs) per collective
    return whole_number_problem(value, 1, 64);
  if (name == "NCCL_MIN_NCHANNELS" || name == "NCCL_MAX_NCHANNELS")  // channels (one block each) per peer link
    return whole_number_problem(value, 1, 64);
  if (name == "NCCL_SHM_MEMCPY_MODE")  // which side's copies the copy engines take
    return value == "1" || value == "2" || value == "3" ? "" : "must be 1 (sender), 2 (receiver) or 3 (both)";
  if (name == "CUDA_MODULE_LOADING")
    return value == "LAZY" || value == "EAGER" ? "" : "must be LAZY or EAGER";
  if (name == "CUDA_DEVICE_MAX_CONNECTIONS")  // hardware work queues the streams share (CUDA's default 8)
    return whole_number_problem(value, 1, 32);
  if (name == "NCCL_NTHREADS")
    return value == "64" || value == "128" || value == "256" || value == "512" ? "" : "must be 64, 128, 256 or 512";
  if (name == "NCCL_DEBUG") {
    std::string v = upper(value);
    return v == "VERSION" || v == "WARN" || v == "INFO" || v == "ABORT" || v == "TRACE"
               ? ""
               : "must be VERSION, WARN, INFO, ABORT or TRACE";
  }
  return "";
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// "FILE: runs[2] (\"label\"): " — the prefix of every error about one run.
std::string run_where(const std::string& source, size_t i, const std::string& label) {
  std::string where = source + ": runs[" + std::to_string(i) + "]";
  if (!label.empty()) where += " (\"" + label + "\")";
  return where + ": ";
}

// Sets `key` in `entries`, replacing an earlier value (from "defaults") in place.
template <typename T>
void set_entry(std::vector<std::pair<std::string, T>>& entries, const std::string& key, T value) {
  for (auto& [k, v] : entries)
    if (k == key) {
      v = std::move(value);
      return;
    }
  entries.emplace_back(key, std::move(value));
}

// {"eval_top1": 0.95} or {"eval_loss": 0.3}.
AccuracyTarget parse_target(const ordered_json& value, const std::string& where) {
  VITDDP_CHECK(value.is_object() && value.size() == 1, where, "\"target\" must be one metric and its value, as "
               "{\"eval_top1\": 0.95}, got ", value.dump());
  const auto item = value.items().begin();
  const std::string metric = item.key();
  const auto& metrics = target_metrics();
  VITDDP_CHECK(std::find(metrics.begin(), metrics.end(), metric) != metrics.end(), where, "unknown target metric \"",
               metric, "\" (known: ", join(metrics), ")");
  VITDDP_CHECK(item.value().is_number(), where, "target \"", metric, "\" must be a number, got ", item.value().dump());
  const double v = item.value().get<double>();
  if (metric == "eval_top1")
    VITDDP_CHECK(v > 0 && v <= 1, where, "target eval_top1 must be a share in (0, 1], got ", v);
  else
    VITDDP_CHECK(v > 0 && std::isfinite(v), where, "target eval_loss must be positive, got ", v);
  return {metric, v};
}

// N (seeds 0..N-1) or a list of distinct seeds.
std::vector<int64_t> parse_seeds(const ordered_json& value, const std::string& where) {
  std::vector<int64_t> seeds;
  if (value.is_number_integer()) {
    const int64_t n = value.get<int64_t>();
    VITDDP_CHECK(n >= 1 && n <= 100, where, "\"seeds\" must be a count in [1, 100] or a list, got ", n);
    for (int64_t k = 0; k < n; ++k) seeds.push_back(k);
    return seeds;
  }
  VITDDP_CHECK(value.is_array() && !value.empty() && value.size() <= 100, where,
               "\"seeds\" must be a count in [1, 100] or a list of 1 to 100 seeds, got ", value.dump());
  for (const auto& s : value) {
    VITDDP_CHECK(s.is_number_integer() && s.get<int64_t>() >= 0, where, "\"seeds\" must hold whole numbers >= 0, got ",
                 s.dump());
    const int64_t seed = s.get<int64_t>();
    VITDDP_CHECK(std::find(seeds.begin(), seeds.end(), seed) == seeds.end(), where, "seed ", seed, " is listed twice");
    seeds.push_back(seed);
  }
  return seeds;
}

// Reads flags and env from `run` into `out` (on top of what is there). `where` prefixes errors.
void parse_settings(const ordered_json& run, const std::string& where, const SweepSchema& schema, SweepRun& out) {
  for (const auto& [key, value] : run.items()) {
    if (key == "label") continue;
    if (key == "env") {
      VITDDP_CHECK(value.is_object(), where, "\"env\" must be an object of NAME: value, got ", value.dump());
      for (const auto& [name, v] : value.items()) {
        const auto& allowed = allowed_sweep_env();
        VITDDP_CHECK(std::find(allowed.begin(), allowed.end(), name) != allowed.end(), where, "env \"", name,
                     "\" is not allowed (allowed: ", join(allowed), ")");
        VITDDP_CHECK(v.is_string() || v.is_number_integer(), where, "env \"", name,
                     "\" must be a string or an integer, got ", v.dump());
        std::string text = v.is_string() ? v.get<std::string>() : v.dump();
        std::string problem = env_value_problem(name, text);
        VITDDP_CHECK(problem.empty(), where, "env \"", name, "\" ", problem, ", got \"", text, "\"");
        set_entry(out.env, name, text);
      }
      continue;
    }
    if (key == "target") {
      out.target = parse_target(value, where);
      continue;
    }
    if (key == "seeds") {
      out.seeds = parse_seeds(value, where);
      continue;
    }
    const FlagType* type = schema.find(key);
    VITDDP_CHECK(type, where, "unknown key \"", key, "\" (known: label, env, seeds, target, ", schema.known_names(),
                 ")");
    VITDDP_CHECK(has_type(value, *type), where, "\"", key, "\" must be ", type_name(*type), ", got ", value.dump());
    if (key == "gpus" || key == "procs")
      VITDDP_CHECK(value.is_number_integer() && value.get<int64_t>() >= 1 && value.get<int64_t>() <= 4096, where,
                   "\"", key, "\" must be a positive integer, got ", value.dump());
    set_entry(out.flags, key, nlohmann::json::parse(value.dump()));
  }
}

SweepRun parse_run(const ordered_json& run, size_t i, const std::string& source, const SweepSchema& schema,
                   const SweepRun& defaults) {
  VITDDP_CHECK(run.is_object(), run_where(source, i, ""), "a run must be a JSON object, got ", run.dump());
  SweepRun out = defaults;
  auto label = run.find("label");
  VITDDP_CHECK(label != run.end(), run_where(source, i, ""), "has no \"label\" (it names the run in the table)");
  VITDDP_CHECK(label->is_string() && !label->get<std::string>().empty(), run_where(source, i, ""),
               "\"label\" must be a non-empty string, got ", label->dump());
  out.label = label->get<std::string>();
  const std::string where = run_where(source, i, out.label);
  parse_settings(run, where, schema, out);
  auto flag = [&](const std::string& name) -> const nlohmann::json* {
    for (const auto& [k, v] : out.flags)
      if (k == name) return &v;
    return nullptr;
  };
  if (out.target) {
    const nlohmann::json* eval = flag("eval-data");
    VITDDP_CHECK(eval && eval->is_string() && !eval->get<std::string>().empty(), where, "a target (",
                 out.target->describe(), ") needs evaluation: set \"eval-data\"");
  }
  VITDDP_CHECK(out.seeds.empty() || !flag("seed"), where, "sets both \"seed\" and \"seeds\" (\"seeds\" gives each "
               "launch its --seed)");
  return out;
}

}  // namespace

SweepSchema::SweepSchema(const std::vector<std::string>& flag_names) {
  for (const auto& name : flag_names) add(name);
}

SweepSchema SweepSchema::from_defaults(const nlohmann::json& defaults) {
  VITDDP_ASSERT(defaults.is_object(), "SweepSchema::from_defaults needs a JSON object of flag defaults");
  SweepSchema schema;
  for (const auto& [name, value] : defaults.items()) {
    FlagType type = FlagType::kAny;
    if (value.is_boolean()) type = FlagType::kBool;
    else if (value.is_number_integer()) type = FlagType::kInteger;
    else if (value.is_number()) type = FlagType::kNumber;
    else if (value.is_string()) type = FlagType::kString;
    schema.add(name, type);
  }
  return schema;
}

const FlagType* SweepSchema::find(const std::string& name) const {
  auto it = flags_.find(name);
  return it == flags_.end() ? nullptr : &it->second;
}

std::string SweepSchema::known_names() const {
  std::vector<std::string> names;
  for (const auto& [name, type] : flags_) names.push_back(name);
  return join(names);
}

const std::vector<std::string>& allowed_sweep_env() {
  static const std::vector<std::string> names = {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_ALGO",     "NCCL_PROTO",
                                                 "NCCL_BUFFSIZE",    "NCCL_NTHREADS",    "NCCL_MAX_CTAS", "NCCL_MIN_CTAS",
                                                 "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
                                                 "NCCL_CTA_POLICY",  "NCCL_DEBUG",       "NCCL_NVLS_ENABLE",
                                                 "NCCL_SHM_USE_CUDA_MEMCPY", "NCCL_SHM_MEMCPY_MODE", "CUDA_MODULE_LOADING",
                                                 "CUDA_DEVICE_MAX_CONNECTIONS"};
  return names;
}

int SweepRun::workers() const {
  for (const char* key : {"gpus", "procs"})
    for (const auto& [name, value] : flags)
      if (name == key && value.is_number_integer() && value.get<int64_t>() > 0) return static_cast<int>(value.get<int64_t>());
  return 1;
}

std::vector<std::string> SweepRun::to_args(const std::function<bool(const std::string&)>& is_flag) const {
  std::vector<std::string> args;
  for (const auto& [name, value] : flags) {
    if (is_flag && !is_flag(name)) {  // an expert key
      args.push_back("--set");
      args.push_back(name + "=" + (value.is_string() ? value.get<std::string>() : value.dump()));
      continue;
    }
    if (value.is_boolean()) {
      args.push_back("--" + name + (value.get<bool>() ? "" : "=false"));
      continue;
    }
    args.push_back("--" + name);
    args.push_back(value.is_string() ? value.get<std::string>() : value.dump());
  }
  return args;
}

Sweep parse_sweep(const std::string& text, const std::string& source, const SweepSchema& schema) {
  ordered_json doc;
  try {
    doc = ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    throw Error(source + ": malformed JSON: " + what);
  }
  VITDDP_CHECK(doc.is_object(), source, ": a sweep file must hold a JSON object with \"name\" and \"runs\"");

  Sweep sweep;
  sweep.source = source;
  std::string baseline_label;
  for (const auto& [key, value] : doc.items()) {
    if (key == "name" || key == "description" || key == "baseline") {
      VITDDP_CHECK(value.is_string(), source, ": \"", key, "\" must be a string, got ", value.dump());
      if (key == "name") sweep.name = value.get<std::string>();
      if (key == "description") sweep.description = value.get<std::string>();
      if (key == "baseline") baseline_label = value.get<std::string>();
    } else if (key != "runs" && key != "defaults") {
      throw Error(source + ": unknown key \"" + key + "\" (known: name, description, baseline, defaults, runs)");
    }
  }
  VITDDP_CHECK(!sweep.name.empty(), source, ": needs a non-empty \"name\"");
  auto runs = doc.find("runs");
  VITDDP_CHECK(runs != doc.end(), source, ": needs \"runs\", a list of runs");
  VITDDP_CHECK(runs->is_array(), source, ": \"runs\" must be a list, got ", runs->dump());
  VITDDP_CHECK(!runs->empty(), source, ": \"runs\" is empty: nothing to run");

  SweepRun defaults;
  if (auto d = doc.find("defaults"); d != doc.end()) {
    VITDDP_CHECK(d->is_object(), source, ": \"defaults\" must be an object of flags (and \"env\"), got ", d->dump());
    VITDDP_CHECK(!d->contains("label"), source, ": \"defaults\" cannot set \"label\"");
    parse_settings(*d, source + ": defaults: ", schema, defaults);
  }

  std::set<std::string> labels;
  for (size_t i = 0; i < runs->size(); ++i) {
    SweepRun run = parse_run((*runs)[i], i, source, schema, defaults);
    VITDDP_CHECK(labels.insert(run.label).second, run_where(source, i, run.label),
                 "the label is used by an earlier run; labels name rows of the table and must differ");
    sweep.runs.push_back(std::move(run));
  }
  if (!baseline_label.empty()) {
    auto it = std::find_if(sweep.runs.begin(), sweep.runs.end(),
                           [&](const SweepRun& r) { return r.label == baseline_label; });
    VITDDP_CHECK(it != sweep.runs.end(), source, ": \"baseline\" names \"", baseline_label, "\", which no run is labelled");
    sweep.baseline = static_cast<size_t>(it - sweep.runs.begin());
  }
  return sweep;
}

Sweep parse_sweep_file(const std::string& path, const SweepSchema& schema) {
  std::ifstream in(path);
  VITDDP_CHECK(in.good(), "cannot read sweep file ", path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_sweep(text.str(), path, schema);
}

}  // namespace vitddp::bench
