#include "train/config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <variant>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/message_text.h"
#include "framework/io/json_structure_pass.h"

namespace vitddp {
const std::vector<std::string>& cpu_allreduce_names() {
  static const std::vector<std::string> names = {"gloo", "ring", "bypass-ring"};
  return names;
}

std::string cpu_allreduce_choices() {
  const std::vector<std::string>& n = cpu_allreduce_names();
  std::string out;
  for (size_t i = 0; i < n.size(); ++i) out += (i == 0 ? "" : i + 1 == n.size() ? " or " : ", ") + n[i];
  return out;
}

namespace {

using FieldPtr = std::variant<int*, int64_t*, uint64_t*, double*, std::string*, bool*>;

// The groups of `train --help`, in order; kExpert: a config key only (`train --help-expert`).
enum class Group { kWhere, kModel, kData, kOptimisation, kDataParallel, kSpeed, kState, kOutput, kExpert };

struct OptionSpec {
  const char* name;  // flag without dashes, and JSON key
  FieldPtr field;
  Group group;
  const char* help;
};

std::vector<OptionSpec> option_table(TrainConfig& c) {
  using G = Group;
  return {
      // where
      {"device", &c.device, G::kWhere, "auto, cpu, cuda or cuda:N (auto: the GPU if one is visible, else the CPU)"},
      {"gpus", &c.gpus, G::kWhere, "train on N GPUs of this machine, one process each (NCCL)"},
      {"procs", &c.procs, G::kWhere, "train on N CPU processes (Gloo)"},
      {"nnodes", &c.nnodes, G::kWhere, "hosts in the run: start `train` on each with the same --rendezvous; --gpus "
                                      "or --procs are per host"},
      {"rendezvous", &c.rendezvous, G::kWhere, "with --nnodes: a folder every host reaches (a shared file system), "
                                              "fresh for each run"},
      // model
      {"model", &c.model, G::kModel, "vit_b_16, vit_b_32, vit_l_16, vit_l_32, vit_h_14, vit_tiny or auto (vit_l_32 on a "
                                     "GPU, vit_tiny on the CPU)"},
      {"dropout", &c.dropout, G::kModel, "dropout probability in the encoder (torchvision's default 0)"},
      {"init-from", &c.init_from, G::kModel, "load weights by torchvision name from a safetensors file"},
      // data
      {"data", &c.data, G::kData, "a folder of class folders of JPEG/PNG images (ImageFolder), tar shards of "
                                  "NAME.jpg + NAME.cls (WebDataset: a folder, or DIR/train-{000..127}.tar), a "
                                  ".safetensors file of images and labels, or synthetic, learnable (class patterns "
                                  "+ noise), gpu (made on the GPU)"},
      {"batch-size", &c.batch_size, G::kData, "images per step per GPU (or per CPU process)"},
      {"eval-data", &c.eval_data, G::kData, "held-out images, as --data: loss, top-1 and top-5 over every one of "
                                            "them, every eval-every steps (an expert key) and at the end"},
      // optimisation
      {"steps", &c.steps, G::kOptimisation, "optimizer steps in all (the first few are left out of the timing)"},
      {"optimizer", &c.optimizer, G::kOptimisation, "sgd or adamw"},
      {"lr", &c.lr, G::kOptimisation, "learning rate"},
      {"momentum", &c.momentum, G::kOptimisation, "SGD momentum"},
      {"weight-decay", &c.weight_decay, G::kOptimisation, "weight decay (decoupled for adamw); not on 1-D "
                                                          "parameters, the class token or the position embedding"},
      {"lr-schedule", &c.lr_schedule, G::kOptimisation, "constant, cosine (to 0 at the last step) or step (x0.1 "
                                                        "every third of the steps), per step"},
      {"warmup-steps", &c.warmup_steps, G::kOptimisation, "linear learning-rate warm-up steps before the schedule"},
      {"label-smoothing", &c.label_smoothing, G::kOptimisation, "label smoothing of the loss (torchvision's ViT "
                                                                "recipe: 0.11)"},
      {"clip-grad-norm", &c.clip_grad_norm, G::kOptimisation, "clip the global gradient norm to this, after the "
                                                              "all-reduce (0: off)"},
      {"model-ema", &c.model_ema, G::kOptimisation, "keep an exponential moving average of the weights with this "
                                                    "decay per step (0: off); evaluation uses it, --save writes it "
                                                    "beside the weights (NAME.ema.safetensors)"},
      {"mixup-alpha", &c.mixup_alpha, G::kOptimisation, "Mixup of each batch with Beta(alpha, alpha) weights (0: off)"},
      {"cutmix-alpha", &c.cutmix_alpha, G::kOptimisation, "CutMix of each batch (0: off; with Mixup, one of the two "
                                                          "per batch)"},
      {"seed", &c.seed, G::kOptimisation, "seed for weights, data and dropout"},
      {"precision", &c.precision, G::kOptimisation, "fp32, tf32 or bf16 (bf16: mixed precision, f32 master weights)"},
      {"accumulate", &c.accumulate, G::kOptimisation, "micro-batches per optimizer step; only the last communicates"},
      {"nonfinite", &c.nonfinite, G::kOptimisation,
       "a NaN or Inf gradient: stop (exit 5, naming the parameter) or skip the step"},
      // data parallel
      {"bucket-mb", &c.bucket_mb, G::kDataParallel,
       "gradient bucket size in MB (PyTorch's bucket_cap_mb; chosen from the link when not given)"},
      {"hook", &c.hook, G::kDataParallel, "gradient communication: allreduce, fp16, bf16 or powersgd"},
      {"powersgd-rank", &c.powersgd_rank, G::kDataParallel, "PowerSGD's matrix approximation rank"},
      {"powersgd-start-iter", &c.powersgd_start_iter, G::kDataParallel,
       "steps of plain all-reduce before PowerSGD compresses"},
      // speed
      {"cuda-graph", &c.cuda_graph, G::kSpeed,
       "GPU: replay each step as one CUDA graph (bit-identical; on wherever the step can be replayed, =false: "
       "eager)"},
      // state
      {"checkpoint-dir", &c.checkpoint_dir, G::kState, "folder for checkpoints (each rank writes its own files)"},
      {"checkpoint-every", &c.checkpoint_every, G::kState,
       "save a checkpoint every N steps (0: only when stopped by a signal)"},
      {"resume", &c.resume, G::kState, "continue from the newest whole checkpoint in --checkpoint-dir"},
      {"max-restarts", &c.max_restarts, G::kState,
       "after a rank fails, restart every rank up to N times, each going on from the newest state all ranks have: "
       "a memory checkpoint (kept by this node's launcher), else --checkpoint-dir's"},
      {"save", &c.save, G::kState, "write the trained weights to this safetensors file (torchvision's names)"},
      // output
      {"json", &c.json, G::kOutput, "print one machine-readable JSON result line at the end"},
      {"print-every", &c.print_every, G::kOutput, "print a progress line every N steps (0: never)"},
      {"trace", &c.trace, G::kOutput,
       "write a Chrome trace (Perfetto) of every step and rank to FILE, with exposed communication per bucket"},
      {"op-breakdown", &c.op_breakdown, G::kOutput,
       "GPU: after the run, two more steps (their updates kept): the host's issue time against the GPU's, and GPU "
       "time per op"},
      // expert keys: the effect of each as measured (docs/performance.md), or what it is for
      {"ddp", &c.ddp, G::kExpert,
       "the data-parallel machinery on one process (PyTorch's DDP on 1 GPU); measured 0.95-0.99x of no DDP"},
      {"image-size", &c.image_size, G::kExpert, "override the model's image size"},
      {"patch-size", &c.patch_size, G::kExpert, "override the model's patch size"},
      {"layers", &c.layers, G::kExpert, "override the number of encoder layers"},
      {"heads", &c.heads, G::kExpert, "override the number of attention heads"},
      {"hidden-dim", &c.hidden_dim, G::kExpert, "override the hidden dimension"},
      {"mlp-dim", &c.mlp_dim, G::kExpert, "override the MLP dimension"},
      {"classes", &c.classes, G::kExpert, "override the number of classes"},
      {"dataset-size", &c.dataset_size, G::kExpert, "samples in the synthetic datasets (an epoch)"},
      {"workers", &c.workers, G::kExpert,
       "loader threads (batches depend on the step alone, not on this); chosen from the CPUs per rank, at most 8: "
       "8 decode well above a bf16 ViT-L/32 step's rate on an H200"},
      {"crop-min-scale", &c.crop_min_scale, G::kExpert,
       "image files: the train crop's smallest share of the image's area (torchvision's RandomResizedCrop scale, "
       "0.08; changes the weights: larger for small images such as digits)"},
      {"random-flip", &c.random_flip, G::kExpert,
       "image files: the train preset's random horizontal flip (torchvision's, p 0.5; changes the weights: false "
       "for images a mirror changes the meaning of, such as digits)"},
      {"bad-sample-limit", &c.bad_sample_limit, G::kExpert,
       "share of the data set's samples that may be bad (corrupt, truncated, not images) before the run stops; "
       "each is skipped with a warning naming it, its place taken by the next sample"},
      {"untimed-steps", &c.untimed_steps, G::kExpert,
       "first steps of a process the timing leaves out (set-up, GEMM tuning, the graph's capture); chosen to cover "
       "the capture"},
      {"first-bucket-mb", &c.first_bucket_mb, G::kExpert,
       "the first (earliest-ready) bucket's cap in MB (PyTorch's 1); 10 in the P2P-off bf16 recipe"},
      {"early-bucket-mb", &c.early_bucket_mb, G::kExpert,
       "caps in MB of buckets 1, 2, ..., comma-separated (\"10,25\"); not yet measured on two GPUs"},
      {"tail-bucket-mb", &c.tail_bucket_mb, G::kExpert,
       "the first layers' last bucket-mb of gradients in buckets this small (0: off); +1.7% on 2 H200s over NVLink "
       "in bf16 at 25 with 100 MB buckets, chosen there"},
      {"powersgd-error-dtype", &c.powersgd_error_dtype, G::kExpert,
       "PowerSGD's error feedback in f32 or in the bucket's dtype, as PyTorch's hook (bucket: +10% on 2 H200s with "
       "P2P off in bf16, loss within 2.2%)"},
      {"update", &c.update, G::kExpert,
       "where DDP's optimizer update runs: after-backward, next-forward (each bucket's when the next forward first "
       "uses it: +24% with P2P off in bf16, chosen there) or sharded (ZeRO-1: each rank its part beside backward, "
       "the weights all-gathered: +1.4% over NVLink in bf16, chosen there); bit-identical on 2 ranks"},
      {"ready-order-share", &c.ready_order_share, G::kExpert,
       "update next-forward: share of the gradient bytes sent in ready order, the rest first layers first (0.3 with "
       "the host copy, 0.35 with NCCL, chosen with P2P off)"},
      {"held-buckets", &c.held_buckets, G::kExpert,
       "update next-forward with ready-order-share < 1: buckets 1..N sent last (+2.3-2.9% with the host copy at 1, "
       "chosen there)"},
      {"transport", &c.transport, G::kExpert,
       "how GPU all-reduces move: nccl, or host-copy (pinned shared host memory and the copy engines, no SMs: "
       "+7% fp32 and +26% bf16 on 2 H200s without peer access, chosen there)"},
      {"host-copy-overlap", &c.host_copy_overlap, G::kExpert,
       "transport host-copy: an all-reduce's copies start while the last one's end; not yet measured on two GPUs"},
      {"host-copy-reduce-beside", &c.host_copy_reduce_beside, G::kExpert,
       "transport host-copy: additions on a stream beside the receiving copies; not yet measured on two GPUs"},
      {"timeout", &c.timeout, G::kExpert, "seconds a collective may take before the run stops with an error"},
      {"cpu-allreduce", &c.cpu_allreduce, G::kExpert,
       "--procs: how f32 buckets are summed: gloo (Gloo's ring), ring (the project's ring), or bypass-ring (its "
       "ring with the straggler bypass: a rank that waited bypass-wait-ms for its predecessor moves on; the sums "
       "equal, the order of additions differs)"},
      {"bypass-wait-ms", &c.bypass_wait_ms, G::kExpert,
       "cpu-allreduce bypass-ring: milliseconds a rank waits for its predecessor's piece before it moves on"},
      {"concurrent-wgrad", &c.concurrent_wgrad, G::kExpert,
       "GPU: a linear layer's weight gradient on a second stream beside its input gradient (bit-identical; +0.8% "
       "fp32 on an H200)"},
      {"gemm-autotune", &c.gemm_autotune, G::kExpert,
       "GPU: time cuBLASLt's candidates once per product shape and keep the fastest, kept in gemm-cache-dir so "
       "that later runs repeat them (+7% bf16 on an H200; false: the heuristic's first choice)"},
      {"gemm-cache-dir", &c.gemm_cache_dir, G::kExpert,
       "folder of gemm-autotune's choices, one file per GPU (default $XDG_CACHE_HOME/vitddp or ~/.cache/vitddp)"},
      {"checkpoint-keep", &c.checkpoint_keep, G::kExpert, "whole checkpoints to keep"},
      {"memory-checkpoint-every", &c.memory_checkpoint_every, G::kExpert,
       "with --max-restarts: steps between memory checkpoints (0: chosen after the first, so that they cost at most "
       "2% of the training time; docs/reliability.md)"},
      {"grad-as-bucket-view", &c.grad_as_bucket_view, G::kExpert,
       "gradients are views into the buckets, no copies (false copies, as PyTorch's default)"},
      {"static-graph", &c.static_graph, G::kExpert,
       "accepted for parity with PyTorch DDP: the reducer never walks the graph, so it changes nothing"},
      {"weight-decay-all", &c.weight_decay_all, G::kExpert,
       "weight decay on every parameter, as torchvision's default (changes the weights; default: timm's, none on "
       "1-D parameters, the class token and the position embedding)"},
      {"warmup-decay", &c.warmup_decay, G::kExpert, "the warm-up's first rate as a share of --lr (torchvision's "
                                                    "lr-warmup-decay; its ViT recipe: 0.033)"},
      {"min-lr", &c.min_lr, G::kExpert, "the cosine schedule's last rate (torchvision's lr-min)"},
      {"lr-step-size", &c.lr_step_size, G::kExpert, "--lr-schedule step: steps between decays (0: a third of the "
                                                    "steps after warm-up)"},
      {"lr-gamma", &c.lr_gamma, G::kExpert, "--lr-schedule step: the factor of each decay"},
      {"eval-every", &c.eval_every, G::kExpert, "with --eval-data: steps between evaluations (0: only at the end)"},
      {"node-rank", &c.node_rank, G::kExpert,
       "with --nnodes: this host's place, 0 .. nnodes - 1 (-1: the order in which the hosts reach --rendezvous; no "
       "bit of the weights depends on it; give it to every host or none)"},
      {"join-timeout", &c.join_timeout, G::kExpert,
       "with --nnodes and --max-restarts: seconds a restart waits for a lost host's place to be taken (the same "
       "command started on another host; torchrun's join timeout)"},
      {"profile-steps", &c.profile_steps, G::kExpert,
       "A:B: cudaProfilerStart before step A and cudaProfilerStop after step B, for nsys --capture-range=cudaProfilerApi"},
      {"find-unused-parameters", &c.find_unused_parameters, G::kExpert,
       "all-reduce zero gradients of parameters the loss did not use (the built-in models use every one; for "
       "parity with PyTorch DDP)"},
  };
}

const char* group_title(Group g) {
  switch (g) {
    case Group::kWhere: return "Where";
    case Group::kModel: return "Model";
    case Group::kData: return "Data";
    case Group::kOptimisation: return "Optimisation";
    case Group::kDataParallel: return "Data parallel";
    case Group::kSpeed: return "Speed";
    case Group::kState: return "State";
    case Group::kOutput: return "Output";
    case Group::kExpert: return "Expert";
  }
  return "";
}

std::string type_name(const FieldPtr& f) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>) return "a boolean";
        else if constexpr (std::is_same_v<T, std::string>) return "a string";
        else if constexpr (std::is_same_v<T, double>) return "a number";
        else return "an integer";
      },
      f);
}

void apply_json_value(const OptionSpec& spec, const nlohmann::json& value, const std::string& file) {
  bool ok = std::visit(
      [&](auto* p) -> bool {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>) {
          if (!value.is_boolean()) return false;
          *p = value.get<bool>();
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!value.is_string()) return false;
          *p = value.get<std::string>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!value.is_number()) return false;
          *p = value.get<double>();
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          if (!value.is_number_unsigned()) return false;
          *p = value.get<uint64_t>();
        } else {
          if (!value.is_number_integer()) return false;
          auto v = value.get<int64_t>();
          if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
              v > static_cast<int64_t>(std::numeric_limits<T>::max()))
            return false;
          *p = static_cast<T>(v);
        }
        return true;
      },
      spec.field);
  VITDDP_CHECK(ok, file, ": \"", spec.name, "\" must be ", type_name(spec.field), ", got ",
               sanitize_for_message(value.dump(), 80));
}

// A --set value as the key's JSON type: booleans true/false (1/0, on/off), decimal numbers,
// strings as they are. nullopt when it is not of that type.
std::optional<nlohmann::json> value_of_text(const FieldPtr& field, const std::string& text) {
  return std::visit(
      [&](auto* p) -> std::optional<nlohmann::json> {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>) {
          if (text == "true" || text == "1" || text == "on") return nlohmann::json(true);
          if (text == "false" || text == "0" || text == "off") return nlohmann::json(false);
          return std::nullopt;
        } else if constexpr (std::is_same_v<T, std::string>) {
          return nlohmann::json(text);
        } else {
          // Decimal numbers only (the JSON parser alone would take "1e400" as a double's Inf).
          if (text.empty() || text.find_first_not_of("0123456789.eE+-") != std::string::npos) return std::nullopt;
          nlohmann::json v = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
          if (!v.is_number()) return std::nullopt;
          if constexpr (std::is_same_v<T, double>) {
            if (!std::isfinite(v.get<double>())) return std::nullopt;
          }
          return v;
        }
      },
      field);
}

void load_json_config(const std::string& path, TrainConfig& config) {
  std::ifstream in(path);
  VITDDP_CHECK(in.good(), "cannot read config file ", path);
  std::ostringstream text;
  text << in.rdbuf();
  VITDDP_CHECK(!in.bad(), "cannot read config file ", path);
  parse_json_config(text.str(), path, &config);
}

// Finds the last --config FILE / --config=FILE before the real parse, so flags can override it.
std::string find_config_flag(int argc, char** argv) {
  std::string found;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--config") {
      VITDDP_CHECK(i + 1 < argc, "--config needs a file name");
      found = argv[++i];
    } else if (arg.rfind("--config=", 0) == 0) {
      found = arg.substr(9);
    }
  }
  return found;
}

// Nesting depth at most 8; malformed JSON as one line.
class ConfigShape final : public JsonStructurePass {
 public:
  explicit ConfigShape(const std::string& path) : path_(path) {}
  bool start_object(std::size_t) override { return open(); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw Error(path_ + ": malformed JSON: " + sanitize_for_message(e.what(), 200));
  }

 private:
  static constexpr int kMaxDepth = 8;
  bool open() {
    VITDDP_CHECK(++depth_ <= kMaxDepth, path_, ": JSON nested deeper than ", kMaxDepth, " levels");
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }
  const std::string& path_;
  int depth_ = 0;
};

// What replaced a flag of earlier versions, for scripts that still pass it; null for others.
const char* removed_flag(const std::string& key) {
  static const std::map<std::string, const char*> removed = {
      {"warmup", "--steps counts every step; the first few of a process are left out of the timing (untimed-steps)"},
      {"update-in-forward", "give --set update=next-forward (chosen with P2P off in bf16)"},
      {"shard-update", "give --set update=sharded (chosen over NVLink in bf16)"},
      {"host-copy-allreduce", "give --set transport=host-copy (chosen where GPUs lack peer access)"},
      {"update-in-backward", "it never paid (docs/tried.md); --set update=sharded updates beside backward"},
      {"sm-carveout", "it never paid once weight gradients ran beside input gradients (docs/tried.md)"},
      {"bind-cpus", "it never paid (docs/tried.md)"},
      {"launch-window", "it never paid (docs/tried.md)"},
      {"nccl-register", "it never paid (docs/tried.md)"},
      {"gemm-candidates", "more candidates never paid (docs/tried.md)"},
      {"powersgd-products", "the bucket passes always beat the matrix products where they apply, and are taken there"},
      {"powersgd-error-settle", "the error settled a step late always paid where it applies, and is taken there"},
  };
  auto it = removed.find(key);
  return it == removed.end() ? nullptr : it->second;
}

const OptionSpec* find_spec(const std::vector<OptionSpec>& table, const std::string& key) {
  for (const auto& s : table)
    if (key == s.name) return &s;
  return nullptr;
}

std::string known_keys(const std::vector<OptionSpec>& table) {
  std::string known;
  for (const auto& s : table) known += (known.empty() ? "" : ", ") + std::string(s.name);
  return known;
}

}  // namespace

void parse_json_config(const std::string& text, const std::string& path, TrainConfig* config) {
  // A config is flat (keys and scalars). A linear SAX pass first refuses deeper nesting, before
  // any tree is built (nlohmann's callback parser would rescan wide objects: quadratic).
  ConfigShape shape(path);
  nlohmann::json::sax_parse(text, &shape);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // the SAX pass accepted it: not expected
    throw Error(path + ": malformed JSON: " + sanitize_for_message(e.what(), 200));
  }
  VITDDP_CHECK(doc.is_object(), path, ": a config file must hold a JSON object");
  auto table = option_table(*config);
  for (auto& [key, value] : doc.items()) {
    const OptionSpec* spec = find_spec(table, key);
    if (!spec)
      throw Error(path + ": unknown key \"" + sanitize_for_message(key, 80) + "\" (known: " + known_keys(table) + ")");
    apply_json_value(*spec, value, path);
    config->given.insert(spec->name);
  }
}

void apply_setting(const std::string& key_value, TrainConfig* config) {
  const size_t eq = key_value.find('=');
  VITDDP_CHECK(eq != std::string::npos && eq > 0, "--set takes KEY=VALUE, got '", sanitize_for_message(key_value, 80),
               "'");
  const std::string key = key_value.substr(0, eq), text = key_value.substr(eq + 1);
  auto table = option_table(*config);
  const OptionSpec* spec = find_spec(table, key);
  VITDDP_CHECK(spec, "--set: unknown key '", sanitize_for_message(key, 80), "' (train --help-expert lists the keys)");
  std::optional<nlohmann::json> value = value_of_text(spec->field, text);
  VITDDP_CHECK(value.has_value(), "--set ", key, ": '", sanitize_for_message(text, 80), "' is not ",
               type_name(spec->field));
  apply_json_value(*spec, *value, "--set");
  config->given.insert(spec->name);
}

bool is_public_flag(const std::string& key) {
  TrainConfig scratch;
  const auto table = option_table(scratch);
  const OptionSpec* spec = find_spec(table, key);
  return spec && spec->group != Group::kExpert;
}

std::string expert_help() {
  TrainConfig defaults;
  std::ostringstream out;
  out << "Expert keys: settings the program chooses itself (it says what it chose, and why, when a run starts).\n"
         "Give one in a --config file ({\"transport\": \"nccl\"}) or as --set KEY=VALUE; a key given is never "
         "changed.\nEffects as measured on H200s (docs/performance.md).\n\n";
  for (const auto& spec : option_table(defaults)) {
    if (spec.group != Group::kExpert) continue;
    std::string value;
    std::visit([&](auto* p) { value = nlohmann::json(*p).dump(); }, spec.field);
    out << "  " << spec.name << " (default " << value << ")\n      " << spec.help << "\n";
  }
  return out.str();
}

std::string ema_file_for(const std::string& save) {
  const std::string ext = ".safetensors";
  if (save.size() > ext.size() && save.compare(save.size() - ext.size(), ext.size(), ext) == 0)
    return save.substr(0, save.size() - ext.size()) + ".ema" + ext;
  return save + ".ema";
}

void check_timeout_flag(double seconds, const char* name) {
  // A millisecond at least (collectives are timed in ms), and no deadline past the clock's range.
  VITDDP_CHECK(seconds >= 0.001 && seconds <= 1e7, name, " must be in [0.001, 1e7] seconds, got ", seconds);
}

void check_procs_flag(int64_t procs) {
  VITDDP_CHECK(procs >= 0 && procs <= 1024, "--procs must be in [0, 1024], got ", procs);
}

nlohmann::json TrainConfig::to_json() const {
  TrainConfig copy = *this;
  nlohmann::json out;
  for (const auto& spec : option_table(copy)) std::visit([&](auto* p) { out[spec.name] = *p; }, spec.field);
  return out;
}

void TrainConfig::validate() const {
  VITDDP_CHECK(gpus >= 0, "--gpus must be >= 0, got ", gpus);
  check_procs_flag(procs);
  VITDDP_CHECK(gpus == 0 || procs == 0, "--gpus and --procs exclude each other");
  const bool on_cpu = procs > 0 || device == "cpu";
  VITDDP_CHECK(!op_breakdown || !on_cpu, "--op-breakdown times CUDA kernels: it needs a GPU, not --procs or --device cpu");
  VITDDP_CHECK(transport != "host-copy" || !on_cpu, "transport host-copy moves GPU buffers with the copy engines: it "
               "needs a GPU, not --procs or --device cpu");
  VITDDP_CHECK(!(cuda_graph && is_given("cuda-graph")) || !on_cpu,
               "--cuda-graph replays CUDA work: it needs a GPU, not --procs or --device cpu");
  VITDDP_CHECK(bucket_mb > 0 && bucket_mb <= 1e6, "--bucket-mb must be > 0, got ", bucket_mb);
  VITDDP_CHECK(first_bucket_mb > 0 && first_bucket_mb <= 1e6, "first-bucket-mb must be > 0, got ", first_bucket_mb);
  early_bucket_mbs();  // throws on a bad list
  VITDDP_CHECK(transport == "nccl" || transport == "host-copy", "transport must be nccl or host-copy, got '",
               transport, "'");
  const std::vector<std::string>& cpu_allreduces = cpu_allreduce_names();
  VITDDP_CHECK(std::find(cpu_allreduces.begin(), cpu_allreduces.end(), cpu_allreduce) != cpu_allreduces.end(),
               "cpu-allreduce must be ", cpu_allreduce_choices(), ", got '", cpu_allreduce, "'");
  VITDDP_CHECK(bypass_wait_ms >= 0 && std::isfinite(bypass_wait_ms), "bypass-wait-ms must be a finite number >= 0, got ",
               bypass_wait_ms);
  VITDDP_CHECK(!host_copy_overlap || transport == "host-copy", "host-copy-overlap changes how the host copy's "
               "all-reduces follow each other: it needs transport host-copy");
  VITDDP_CHECK(!host_copy_reduce_beside || transport == "host-copy", "host-copy-reduce-beside changes where the host "
               "copy adds received chunks: it needs transport host-copy");
  VITDDP_CHECK(tail_bucket_mb == 0 || (tail_bucket_mb >= 1e-6 && tail_bucket_mb < bucket_mb), "tail-bucket-mb must "
               "be 0 (off) or in [1e-06, --bucket-mb ", bucket_mb, "), got ", tail_bucket_mb);
  VITDDP_CHECK(hook == "allreduce" || hook == "fp16" || hook == "bf16" || hook == "powersgd", "unknown hook '", hook,
               "' (allreduce, fp16, bf16, powersgd)");
  VITDDP_CHECK(powersgd_rank >= 1, "--powersgd-rank must be >= 1, got ", powersgd_rank);
  VITDDP_CHECK(powersgd_start_iter >= 0, "--powersgd-start-iter must be >= 0, got ", powersgd_start_iter);
  VITDDP_CHECK(powersgd_error_dtype == "f32" || powersgd_error_dtype == "bucket",
               "powersgd-error-dtype must be f32 or bucket, got '", powersgd_error_dtype, "'");
  VITDDP_CHECK(accumulate >= 1 && accumulate <= 1000000, "--accumulate must be in [1, 1000000], got ", accumulate);
  check_timeout_flag(timeout);
  check_timeout_flag(join_timeout, "join-timeout");
  VITDDP_CHECK(nonfinite == "stop" || nonfinite == "skip", "--nonfinite must be stop or skip, got '", nonfinite, "'");
  for (auto [v, name] : {std::pair{image_size, "image-size"}, {patch_size, "patch-size"}, {layers, "layers"},
                         {heads, "heads"}, {hidden_dim, "hidden-dim"}, {mlp_dim, "mlp-dim"}, {classes, "classes"}})
    VITDDP_CHECK(v >= 0, name, " must be positive, got ", v);
  VITDDP_CHECK(batch_size > 0, "--batch-size must be positive, got ", batch_size);
  VITDDP_CHECK(batch_size <= 1 << 20, "--batch-size ", batch_size, " is too large");
  // Bounded so that step counts cannot overflow; the step clock keeps an entry per step.
  VITDDP_CHECK(steps > 0 && steps <= 100000000, "--steps must be in [1, 100000000], got ", steps);
  VITDDP_CHECK(untimed_steps >= 0 && untimed_steps <= 100000000, "untimed-steps must be in [0, 100000000], got ",
               untimed_steps);
  VITDDP_CHECK(dataset_size > 0 && dataset_size <= kMaxDatasetSize, "dataset-size must be in [1, ", kMaxDatasetSize,
               "], got ", dataset_size);
  VITDDP_CHECK(workers >= 0 && workers <= 256, "workers must be in [0, 256], got ", workers);
  VITDDP_CHECK(crop_min_scale > 0 && crop_min_scale <= 1, "crop-min-scale must be in (0, 1], got ", crop_min_scale);
  VITDDP_CHECK(bad_sample_limit >= 0 && bad_sample_limit <= 1, "bad-sample-limit must be in [0, 1], got ",
               bad_sample_limit);
  VITDDP_CHECK(optimizer == "sgd" || optimizer == "adamw", "unknown optimizer '", optimizer, "' (sgd, adamw)");
  VITDDP_CHECK(lr >= 0, "--lr must be >= 0, got ", lr);
  VITDDP_CHECK(momentum >= 0 && momentum < 1, "--momentum must be in [0, 1), got ", momentum);
  VITDDP_CHECK(weight_decay >= 0, "--weight-decay must be >= 0, got ", weight_decay);
  VITDDP_CHECK(dropout >= 0 && dropout < 1, "--dropout must be in [0, 1), got ", dropout);
  VITDDP_CHECK(lr_schedule == "constant" || lr_schedule == "cosine" || lr_schedule == "step",
               "--lr-schedule must be constant, cosine or step, got '", lr_schedule, "'");
  VITDDP_CHECK(warmup_steps >= 0 && warmup_steps < steps, "--warmup-steps must be in [0, --steps ", steps, "), got ",
               warmup_steps);
  VITDDP_CHECK(warmup_decay > 0 && warmup_decay <= 1, "warmup-decay must be in (0, 1], got ", warmup_decay);
  VITDDP_CHECK(min_lr >= 0 && min_lr <= lr, "min-lr must be in [0, --lr ", lr, "], got ", min_lr);
  VITDDP_CHECK(lr_step_size >= 0, "lr-step-size must be >= 0, got ", lr_step_size);
  VITDDP_CHECK(lr_gamma > 0 && lr_gamma <= 1, "lr-gamma must be in (0, 1], got ", lr_gamma);
  VITDDP_CHECK(label_smoothing >= 0 && label_smoothing < 1, "--label-smoothing must be in [0, 1), got ",
               label_smoothing);
  VITDDP_CHECK(clip_grad_norm >= 0 && std::isfinite(clip_grad_norm), "--clip-grad-norm must be >= 0 (0: off), got ",
               clip_grad_norm);
  VITDDP_CHECK(model_ema == 0 || (model_ema > 0 && model_ema < 1), "--model-ema must be 0 (off) or a decay in (0, 1), "
               "got ", model_ema);
  VITDDP_CHECK(mixup_alpha >= 0 && mixup_alpha <= 1000, "--mixup-alpha must be in [0, 1000] (0: off), got ",
               mixup_alpha);
  VITDDP_CHECK(cutmix_alpha >= 0 && cutmix_alpha <= 1000, "--cutmix-alpha must be in [0, 1000] (0: off), got ",
               cutmix_alpha);
  VITDDP_CHECK(!(data == "gpu" && mixup_alpha + cutmix_alpha > 0), "--mixup-alpha and --cutmix-alpha mix the "
               "loader's batches; --data gpu makes its batches on the GPU without a loader");
  VITDDP_CHECK(eval_every >= 0, "eval-every must be >= 0, got ", eval_every);
  VITDDP_CHECK(eval_every == 0 || !eval_data.empty(), "eval-every needs --eval-data");
  VITDDP_CHECK(!(clip_grad_norm > 0 && update == "next-forward"), "--clip-grad-norm needs every gradient reduced "
               "before any update; update next-forward updates each bucket at the next forward: use after-backward "
               "or sharded");
  VITDDP_CHECK(precision == "fp32" || precision == "tf32" || precision == "bf16", "unknown precision '", precision,
               "' (fp32, tf32, bf16)");
  VITDDP_CHECK(update == "after-backward" || update == "next-forward" || update == "sharded",
               "update must be after-backward, next-forward or sharded, got '", update, "'");
  VITDDP_CHECK(ready_order_share > 0 && ready_order_share <= 1, "ready-order-share must be in (0, 1], got ",
               ready_order_share);
  VITDDP_CHECK(ready_order_share == 1 || update == "next-forward", "ready-order-share ", ready_order_share,
               " sends the first layers' gradients first for the next forward; without update next-forward that "
               "forward waits for all of them anyway");
  VITDDP_CHECK(held_buckets >= 0 && held_buckets <= 100000, "held-buckets must be in [0, 100000], got ", held_buckets);
  VITDDP_CHECK(held_buckets == 0 || update == "next-forward", "held-buckets ", held_buckets, " sends the last layers' "
               "gradients last for the next forward; without update next-forward that forward waits for all of them "
               "anyway");
  VITDDP_CHECK(held_buckets == 0 || ready_order_share < 1, "held-buckets ", held_buckets, " holds buckets out of "
               "the part sent in ready order: it needs ready-order-share below 1");
  VITDDP_CHECK(update == "after-backward" || nonfinite == "stop", "update ", update, " applies updates before the "
               "step's gradients have all been scanned; --nonfinite skip needs them all first");
  VITDDP_CHECK(update != "sharded" || hook == "allreduce", "update sharded reduce-scatters each bucket in place: it "
               "takes --hook allreduce, not --hook ", hook);
  VITDDP_CHECK(update != "sharded" || grad_as_bucket_view, "update sharded updates each bucket's part of the gradient "
               "buffer in place: it needs grad-as-bucket-view (on by default)");
  VITDDP_CHECK(!(update == "sharded" && transport == "host-copy"), "update sharded reduce-scatters and all-gathers "
               "through NCCL; transport host-copy carries all-reduces only: choose one");
  VITDDP_CHECK(print_every >= 0, "--print-every must be >= 0, got ", print_every);
  profile_range();  // validates the format
  VITDDP_CHECK(checkpoint_every >= 0, "--checkpoint-every must be >= 0, got ", checkpoint_every);
  VITDDP_CHECK(max_restarts >= 0 && max_restarts <= 1000, "--max-restarts must be in [0, 1000], got ", max_restarts);
  VITDDP_CHECK(memory_checkpoint_every >= 0, "memory-checkpoint-every must be >= 0, got ", memory_checkpoint_every);
  VITDDP_CHECK(checkpoint_keep >= 1 && checkpoint_keep <= 1000000, "checkpoint-keep must be in [1, 1000000], got ",
               checkpoint_keep);
  VITDDP_CHECK(!(checkpoint_every > 0 || resume) || !checkpoint_dir.empty() || (resume && max_restarts > 0),
               "--checkpoint-every and --resume need --checkpoint-dir");
}

std::vector<double> TrainConfig::early_bucket_mbs() const {
  std::vector<double> sizes;
  if (early_bucket_mb.empty()) return sizes;
  const std::string bad_list = "early-bucket-mb must be sizes in MB in [1e-06, 1e6], comma-separated (\"10,25\"), "
                               "got '" + early_bucket_mb + "'";
  std::stringstream list(early_bucket_mb);
  std::string item;
  while (std::getline(list, item, ',')) {
    size_t used = 0;
    double mb = 0;
    // Decimal numbers only (std::stod alone would take spaces and hexadecimal).
    const bool decimal = !item.empty() && item.find_first_not_of("0123456789.eE+-") == std::string::npos;
    try {
      if (decimal) mb = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    VITDDP_CHECK(decimal && used == item.size() && mb >= 1e-6 && mb <= 1e6, bad_list);
    sizes.push_back(mb);
  }
  VITDDP_CHECK(!sizes.empty() && early_bucket_mb.back() != ',', bad_list);  // getline drops a trailing empty item
  return sizes;
}

std::pair<int64_t, int64_t> TrainConfig::profile_range() const {
  if (profile_steps.empty()) return {0, 0};
  long long a = 0, b = 0;
  char extra = 0;
  VITDDP_CHECK(std::sscanf(profile_steps.c_str(), "%lld:%lld%c", &a, &b, &extra) == 2 && a >= 1 && b >= a,
               "profile-steps must be A:B with 1 <= A <= B, got '", profile_steps, "'");
  return {a, b};
}

bool parse_train_config(int argc, char** argv, TrainConfig* config) {
  std::string config_file = find_config_flag(argc, argv);
  if (!config_file.empty()) load_json_config(config_file, *config);
  config->config_file = config_file;

  CLI::App app{"vitddp train: data-parallel Vision Transformer training (one process per GPU, NCCL; or CPU "
               "processes, Gloo).\nSettings that change no bit of the weights are chosen by the program and said "
               "at start; train --help-expert lists them."};
  app.set_config();  // no CLI11 config files: --config is ours (JSON)
  app.add_option("--config", config->config_file, "JSON config file of flags and expert keys (configs/*.json); "
                 "the command line overrides it")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::vector<std::string> settings;
  app.add_option("--set", settings, "KEY=VALUE: an expert key (train --help-expert), after --config; may repeat");
  bool help_expert = false;
  app.add_flag("--help-expert", help_expert, "list the expert keys with their defaults and measured effects");
  auto table = option_table(*config);
  std::vector<std::pair<const OptionSpec*, CLI::Option*>> flags;
  for (const auto& spec : table) {
    if (spec.group == Group::kExpert) continue;
    std::string flag = std::string("--") + spec.name;
    CLI::Option* option = nullptr;
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>) {
            option = app.add_flag(flag, *p, spec.help);
          } else {
            // The last occurrence wins, so a flag can override an earlier one (or a script's).
            option = app.add_option(flag, *p, spec.help)
                         ->capture_default_str()
                         ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
          }
        },
        spec.field);
    option->group(group_title(spec.group));
    flags.push_back({&spec, option});
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return false;
  } catch (const CLI::CallForAllHelp& e) {
    app.exit(e);
    return false;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    // An expert key or a removed flag given as a flag: say what to do instead.
    const size_t dashes = what.find("--");
    if (what.find("following argument") != std::string::npos && dashes != std::string::npos) {
      std::string key = what.substr(dashes + 2);
      key = key.substr(0, key.find_first_of("= "));
      if (find_spec(table, key))
        what = "--" + key + " is an expert key: give it as --set " + key + "=VALUE or in a --config file";
      else if (const char* instead = removed_flag(key))
        what = "--" + key + " was removed: " + instead;
    }
    throw Error(what);
  }
  if (help_expert) {
    std::cout << expert_help();
    return false;
  }
  for (const auto& [spec, option] : flags)
    if (option->count() > 0) config->given.insert(spec->name);
  for (const std::string& s : settings) apply_setting(s, config);
  config->validate();
  return true;
}

}  // namespace vitddp
