#include "train/config.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <variant>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/message_text.h"
#include "framework/io/json_structure_pass.h"

namespace vitddp {
namespace {

using FieldPtr = std::variant<int*, int64_t*, uint64_t*, double*, std::string*, bool*>;

struct OptionSpec {
  const char* name;  // flag without dashes, and JSON key
  FieldPtr field;
  const char* help;
};

std::vector<OptionSpec> option_table(TrainConfig& c) {
  return {
      {"device", &c.device, "auto, cpu, cuda or cuda:N (auto: the GPU if one is visible, else the CPU)"},
      {"gpus", &c.gpus, "number of GPUs to train on (one process each)"},
      {"procs", &c.procs, "data-parallel training on this many CPU processes (Gloo)"},
      {"ddp", &c.ddp,
       "data-parallel machinery even on one process: a process group of one and the reducer (PyTorch's DDP "
       "wrapper on one GPU); more than one process always uses it"},
      {"bucket-mb", &c.bucket_mb, "gradient bucket size in MB (PyTorch's bucket_cap_mb)"},
      {"first-bucket-mb", &c.first_bucket_mb, "size of the first (earliest-ready) bucket in MB"},
      {"early-bucket-mb", &c.early_bucket_mb,
       "DDP: sizes in MB of the buckets after the first, in ready order, comma-separated (\"10,25\": bucket 1 of "
       "10 MB, bucket 2 of 25); the later ones take --bucket-mb. Small held buckets and a small one after them "
       "keep a slow link busy after the first bucket (empty: all --bucket-mb)"},
      {"tail-bucket-mb", &c.tail_bucket_mb,
       "DDP: the last --bucket-mb of gradients (the first layers', ready as backward ends) go in buckets of this "
       "many MB, below --bucket-mb, so less communication is left when backward ends (0: off; with "
       "--ready-order-share < 1 those buckets go after backward anyway)"},
      {"hook", &c.hook, "gradient communication: allreduce, fp16, bf16 or powersgd"},
      {"powersgd-rank", &c.powersgd_rank, "PowerSGD matrix approximation rank"},
      {"powersgd-start-iter", &c.powersgd_start_iter, "steps of plain all-reduce before PowerSGD compresses"},
      {"powersgd-error-dtype", &c.powersgd_error_dtype,
       "PowerSGD's error feedback (and the matrix it compresses) in f32, or in the bucket's dtype as PyTorch's "
       "hook keeps it (bucket: with bf16 training, half the bytes through the hook's passes)"},
      {"powersgd-products", &c.powersgd_products,
       "PowerSGD's products P = M Q and Q = M^T P: passes (P fused into the compensation, Q a pass of its own; "
       "ranks 4 and 8 on a GPU, any on the CPU) or gemm (through cuBLASLt or the CPU's matrix products)"},
      {"powersgd-error-settle", &c.powersgd_error_settle,
       "when PowerSGD subtracts what it sent from the error: late (by the next step's compensation, where the "
       "products are passes and Q is warm-started; the expansion then only writes the bucket) or eager (by the "
       "expansion, as PyTorch's hook)"},
      {"grad-as-bucket-view", &c.grad_as_bucket_view,
       "gradients are views into the buckets, no copies (default on; --grad-as-bucket-view=false copies)"},
      {"static-graph", &c.static_graph,
       "accepted for parity with PyTorch DDP: vitddp's reducer never walks the graph, so it changes nothing"},
      {"find-unused-parameters", &c.find_unused_parameters, "all-reduce zero gradients of parameters the loss did not use"},
      {"accumulate", &c.accumulate, "micro-batches per optimizer step; only the last communicates"},
      {"concurrent-wgrad", &c.concurrent_wgrad,
       "GPU: each linear layer's weight gradient is computed on a second stream beside its input gradient, so "
       "that the two products fill each other's last, partly idle wave of tiles (false: one after the other)"},
      {"sm-carveout", &c.sm_carveout,
       "GPU DDP: NCCL uses at most N SMs per collective and backward's matrix products are tuned for the other "
       "SMs, so communication kernels running beside them do not leave GEMM waves one SM short (0: off)"},
      {"bind-cpus", &c.bind_cpus,
       "hold each rank's training thread to N CPUs of its own (local rank r: the r-th N of the CPUs it may use), "
       "set before the first step, after NCCL's and the loader's threads have started (0: anywhere)"},
      {"launch-window", &c.launch_window,
       "GPU: ops the host may queue ahead of the GPU before it waits, polling, outside the CUDA driver (0: no "
       "limit, the driver's queue holds the host back)"},
      {"update-in-forward", &c.update_in_forward,
       "DDP: the step ends when backward is issued; each bucket's optimizer update is applied when the next "
       "forward first uses its parameters, after its all-reduce only, so communication runs on beside the next "
       "forward (weights bit-identical to the plain update at --sm-carveout 0; needs --nonfinite stop)"},
      {"update-in-backward", &c.update_in_backward,
       "DDP: each bucket's optimizer update runs right after its communication, on a stream of its own beside the "
       "rest of backward, instead of in one pass after backward (weights bit-identical to the plain update; needs "
       "--nonfinite stop and --hook allreduce or powersgd, or bf16 in bf16 training)"},
      {"shard-update", &c.shard_update,
       "DDP: each bucket is reduce-scattered; each rank updates its own part of it, beside backward as with "
       "--update-in-backward, and the ranks all-gather the updated weights (ZeRO stage 1: the update's work and "
       "the master weights' reads divided by the ranks, the bytes on the link unchanged; weights bit-identical "
       "to the plain update with 2 ranks; needs --hook allreduce and --nonfinite stop)"},
      {"nccl-register", &c.nccl_register,
       "GPU DDP: the gradient buffer comes from ncclMemAlloc and is registered with the communicator, so NCCL's "
       "all-reduce works on the buckets in place over NVLink instead of through its staging buffers"},
      {"host-copy-allreduce", &c.host_copy_allreduce,
       "GPU DDP on one host: all-reduces go through pinned shared host memory, moved by the copy engines and paced "
       "by stream memory operations, instead of NCCL (no kernel spins on the SMs beside backward; for GPUs without "
       "peer access: NCCL_P2P_DISABLE=1, PCIe servers); works under --cuda-graph"},
      {"host-copy-overlap", &c.host_copy_overlap,
       "with --host-copy-allreduce: an all-reduce's copies start while the last one's final chunks still come in "
       "(their buffers apart), so the link does not drain between DDP's buckets (default off: each starts after "
       "the last one ended)"},
      {"host-copy-reduce-beside", &c.host_copy_reduce_beside,
       "with --host-copy-allreduce: the additions of received chunks run on a stream of their own beside the "
       "copies, so the host -> device copies do not wait for them (default off: on the receiving stream)"},
      {"cuda-graph", &c.cuda_graph,
       "GPU: from the third step on (with --hook powersgd, once a compressed step has run), forward, backward and "
       "DDP's bucket collectives are replayed as one CUDA graph "
       "captured from that step (the optimizer runs after it, or inside it with --update-in-backward), so the host issues a step in a few launches; a "
       "setting the graph cannot replay says why at start and every step runs eagerly"},
      {"ready-order-share", &c.ready_order_share,
       "DDP: share of the gradient bytes all-reduced in the order backward makes them ready; the remaining buckets "
       "go after backward, the first layers' first, for the next forward (< 1 needs --update-in-forward; 1: all in "
       "ready order, as PyTorch)"},
      {"held-buckets", &c.held_buckets,
       "DDP with --update-in-forward and --ready-order-share < 1: buckets 1..N (the layers just before the "
       "last, made right after bucket 0) are sent after all others, so the link's last bytes of a step are layers "
       "the next forward runs last and the link idles only through those (0: none)"},
      {"gemm-autotune", &c.gemm_autotune,
       "GPU: time cuBLASLt's candidate algorithms once per matrix-product shape and keep the fastest; the choices "
       "are kept in --gemm-cache-dir so that later runs (a resumed one) make the same ones (false: cuBLASLt's "
       "heuristic's first choice)"},
      {"gemm-candidates", &c.gemm_candidates,
       "GPU: how many of cuBLASLt's heuristic candidates --gemm-autotune times per matrix-product shape (more: a "
       "longer first step, perhaps faster products; kept in a cache file of their own)"},
      {"gemm-cache-dir", &c.gemm_cache_dir,
       "folder for --gemm-autotune's choices, one file per GPU (default $XDG_CACHE_HOME/vitddp or ~/.cache/vitddp)"},
      {"timeout", &c.timeout, "seconds a collective may take before the run stops with an error"},
      {"checkpoint-dir", &c.checkpoint_dir, "folder for checkpoints (each rank writes its own files)"},
      {"checkpoint-every", &c.checkpoint_every, "save a checkpoint every N steps (0: only when stopped by a signal)"},
      {"checkpoint-keep", &c.checkpoint_keep, "whole checkpoints to keep"},
      {"resume", &c.resume, "continue from the newest whole checkpoint in --checkpoint-dir"},
      {"nonfinite", &c.nonfinite, "a NaN or Inf gradient: stop (exit 5, naming the parameter) or skip the step"},
      {"model", &c.model, "vit_b_16, vit_b_32, vit_l_16, vit_l_32, vit_h_14, vit_tiny or auto"},
      {"image-size", &c.image_size, "override the model's image size"},
      {"patch-size", &c.patch_size, "override the model's patch size"},
      {"layers", &c.layers, "override the number of encoder layers"},
      {"heads", &c.heads, "override the number of attention heads"},
      {"hidden-dim", &c.hidden_dim, "override the hidden dimension"},
      {"mlp-dim", &c.mlp_dim, "override the MLP dimension"},
      {"classes", &c.classes, "override the number of classes"},
      {"dropout", &c.dropout, "dropout probability in the encoder (torchvision default 0)"},
      {"init-from", &c.init_from, "load weights by torchvision name from a safetensors file"},
      {"save", &c.save, "write the trained weights to this safetensors file"},
      {"data", &c.data, "synthetic (random images), learnable (class patterns + noise), gpu, or a .safetensors file"},
      {"dataset-size", &c.dataset_size, "samples in the synthetic dataset (0: enough for the run)"},
      {"workers", &c.workers, "loader worker threads"},
      {"batch-size", &c.batch_size, "images per step per GPU"},
      {"steps", &c.steps, "timed training steps"},
      {"warmup", &c.warmup, "untimed warm-up steps before them"},
      {"optimizer", &c.optimizer, "sgd or adamw"},
      {"lr", &c.lr, "learning rate"},
      {"momentum", &c.momentum, "SGD momentum"},
      {"weight-decay", &c.weight_decay, "weight decay (decoupled for adamw)"},
      {"seed", &c.seed, "seed for weights, data and dropout"},
      {"precision", &c.precision, "fp32, tf32 or bf16"},
      {"json", &c.json, "print one machine-readable JSON result line at the end"},
      {"print-every", &c.print_every, "print a progress line every N steps (0: never)"},
      {"profile-steps", &c.profile_steps,
       "A:B: call cudaProfilerStart before step A and cudaProfilerStop after step B, for nsys's cudaProfilerApi capture"},
      {"op-breakdown", &c.op_breakdown,
       "GPU: after the timed steps, run two more (their updates are kept): one timing how long the host takes to "
       "issue a step against when the GPU finishes it, one timed op by op (CUDA events), and print where it goes"},
      {"trace", &c.trace,
       "write a Chrome trace (Perfetto, chrome://tracing) of every step and rank to FILE, with per-step and "
       "per-bucket analysis (exposed communication, overlap)"},
  };
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
    const OptionSpec* spec = nullptr;
    for (const auto& s : table)
      if (key == s.name) spec = &s;
    if (!spec) {
      std::string known;
      for (const auto& s : table) known += (known.empty() ? "" : ", ") + std::string(s.name);
      throw Error(path + ": unknown key \"" + sanitize_for_message(key, 80) + "\" (known: " + known + ")");
    }
    apply_json_value(*spec, value, path);
  }
}

void check_timeout_flag(double seconds) {
  // A millisecond at least (collectives are timed in ms), and no deadline past the clock's range.
  VITDDP_CHECK(seconds >= 0.001 && seconds <= 1e7, "--timeout must be in [0.001, 1e7] seconds, got ", seconds);
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
  VITDDP_CHECK(!op_breakdown || (procs == 0 && device != "cpu"),
               "--op-breakdown times CUDA kernels: it needs a GPU, not --procs or --device cpu");
  VITDDP_CHECK(!nccl_register || (procs == 0 && device != "cpu"),
               "--nccl-register registers gradients with NCCL: it needs a GPU, not --procs or --device cpu");
  VITDDP_CHECK(!host_copy_allreduce || (procs == 0 && device != "cpu"),
               "--host-copy-allreduce moves GPU buffers with the copy engines: it needs a GPU, not --procs or --device "
               "cpu");
  VITDDP_CHECK(!cuda_graph || (procs == 0 && device != "cpu"),
               "--cuda-graph replays CUDA work: it needs a GPU, not --procs or --device cpu");
  VITDDP_CHECK(bucket_mb > 0 && bucket_mb <= 1e6, "--bucket-mb must be > 0, got ", bucket_mb);
  VITDDP_CHECK(first_bucket_mb > 0 && first_bucket_mb <= 1e6, "--first-bucket-mb must be > 0, got ", first_bucket_mb);
  early_bucket_mbs();  // throws on a bad list
  VITDDP_CHECK(!host_copy_overlap || host_copy_allreduce, "--host-copy-overlap changes how --host-copy-allreduce's "
               "all-reduces follow each other: it needs --host-copy-allreduce");
  VITDDP_CHECK(!host_copy_reduce_beside || host_copy_allreduce, "--host-copy-reduce-beside changes where "
               "--host-copy-allreduce adds received chunks: it needs --host-copy-allreduce");
  VITDDP_CHECK(tail_bucket_mb == 0 || (tail_bucket_mb >= 1e-6 && tail_bucket_mb < bucket_mb), "--tail-bucket-mb must "
               "be 0 (off) or in [1e-06, --bucket-mb ", bucket_mb, "), got ", tail_bucket_mb);
  VITDDP_CHECK(hook == "allreduce" || hook == "fp16" || hook == "bf16" || hook == "powersgd", "unknown hook '", hook,
               "' (allreduce, fp16, bf16, powersgd)");
  VITDDP_CHECK(powersgd_rank >= 1, "--powersgd-rank must be >= 1, got ", powersgd_rank);
  VITDDP_CHECK(powersgd_start_iter >= 0, "--powersgd-start-iter must be >= 0, got ", powersgd_start_iter);
  VITDDP_CHECK(powersgd_error_dtype == "f32" || powersgd_error_dtype == "bucket",
               "--powersgd-error-dtype must be f32 or bucket, got '", powersgd_error_dtype, "'");
  VITDDP_CHECK(powersgd_products == "passes" || powersgd_products == "gemm",
               "--powersgd-products must be passes or gemm, got '", powersgd_products, "'");
  VITDDP_CHECK(powersgd_error_settle == "late" || powersgd_error_settle == "eager",
               "--powersgd-error-settle must be late or eager, got '", powersgd_error_settle, "'");
  VITDDP_CHECK(accumulate >= 1 && accumulate <= 1000000, "--accumulate must be in [1, 1000000], got ", accumulate);
  check_timeout_flag(timeout);
  VITDDP_CHECK(nonfinite == "stop" || nonfinite == "skip", "--nonfinite must be stop or skip, got '", nonfinite, "'");
  for (auto [v, name] : {std::pair{image_size, "--image-size"}, {patch_size, "--patch-size"}, {layers, "--layers"},
                         {heads, "--heads"}, {hidden_dim, "--hidden-dim"}, {mlp_dim, "--mlp-dim"},
                         {classes, "--classes"}})
    VITDDP_CHECK(v >= 0, name, " must be positive, got ", v);
  VITDDP_CHECK(batch_size > 0, "--batch-size must be positive, got ", batch_size);
  VITDDP_CHECK(batch_size <= 1 << 20, "--batch-size ", batch_size, " is too large");
  // Bounded so that warmup + steps cannot overflow; the step clock keeps an entry per step.
  VITDDP_CHECK(steps > 0 && steps <= 100000000, "--steps must be in [1, 100000000], got ", steps);
  VITDDP_CHECK(warmup >= 0 && warmup <= 100000000, "--warmup must be in [0, 100000000], got ", warmup);
  VITDDP_CHECK(dataset_size >= 0 && dataset_size <= kMaxDatasetSize, "--dataset-size must be in [0, ", kMaxDatasetSize,
               "], got ", dataset_size);
  VITDDP_CHECK(workers >= 0 && workers <= 256, "--workers must be in [0, 256], got ", workers);
  VITDDP_CHECK(optimizer == "sgd" || optimizer == "adamw", "unknown optimizer '", optimizer, "' (sgd, adamw)");
  VITDDP_CHECK(lr >= 0, "--lr must be >= 0, got ", lr);
  VITDDP_CHECK(momentum >= 0 && momentum < 1, "--momentum must be in [0, 1), got ", momentum);
  VITDDP_CHECK(weight_decay >= 0, "--weight-decay must be >= 0, got ", weight_decay);
  VITDDP_CHECK(dropout >= 0 && dropout < 1, "--dropout must be in [0, 1), got ", dropout);
  VITDDP_CHECK(precision == "fp32" || precision == "tf32" || precision == "bf16", "unknown precision '", precision,
               "' (fp32, tf32, bf16)");
  VITDDP_CHECK(sm_carveout >= 0 && sm_carveout <= 64, "--sm-carveout must be in [0, 64], got ", sm_carveout);
  VITDDP_CHECK(bind_cpus >= 0 && bind_cpus <= 1024, "--bind-cpus must be in [0, 1024], got ", bind_cpus);
  VITDDP_CHECK(launch_window >= 0 && launch_window <= 1000000, "--launch-window must be 0 (no limit) or a number of "
               "ops up to 1000000, got ", launch_window);
  VITDDP_CHECK(ready_order_share > 0 && ready_order_share <= 1, "--ready-order-share must be in (0, 1], got ",
               ready_order_share);
  VITDDP_CHECK(ready_order_share == 1 || update_in_forward, "--ready-order-share ", ready_order_share,
               " sends the first layers' gradients first for the next forward; without --update-in-forward that "
               "forward waits for all of them anyway");
  VITDDP_CHECK(held_buckets >= 0 && held_buckets <= 100000, "--held-buckets must be in [0, 100000], got ",
               held_buckets);
  VITDDP_CHECK(held_buckets == 0 || update_in_forward, "--held-buckets ", held_buckets, " sends the last layers' "
               "gradients last for the next forward; without --update-in-forward that forward waits for all of them "
               "anyway");
  VITDDP_CHECK(held_buckets == 0 || ready_order_share < 1, "--held-buckets ", held_buckets, " holds buckets out of "
               "the part sent in ready order: it needs --ready-order-share below 1");
  VITDDP_CHECK(!update_in_forward || nonfinite == "stop", "--update-in-forward applies updates before the step's "
               "gradients have all been scanned; --nonfinite skip needs them all first");
  VITDDP_CHECK(!(update_in_backward && update_in_forward), "--update-in-backward and --update-in-forward place the "
               "same updates in two places: choose one");
  VITDDP_CHECK(!update_in_backward || nonfinite == "stop", "--update-in-backward applies updates before the step's "
               "gradients have all been scanned; --nonfinite skip needs them all first");
  VITDDP_CHECK(!update_in_backward || hook == "allreduce" || hook == "powersgd" ||
                   (hook == "bf16" && precision == "bf16"),
               "--update-in-backward takes --hook allreduce or powersgd, or --hook bf16 with --precision bf16: --hook ",
               hook, (precision != "bf16" ? " on f32 buckets" : ""), " communicates through buffers of its own, which "
               "the compute stream would free while the update stream may still read them");
  VITDDP_CHECK(!shard_update || hook == "allreduce", "--shard-update reduce-scatters each bucket in place: it takes "
               "--hook allreduce, not --hook ", hook);
  VITDDP_CHECK(!shard_update || nonfinite == "stop", "--shard-update applies updates before the step's gradients "
               "have all been scanned; --nonfinite skip needs them all first");
  VITDDP_CHECK(!(shard_update && update_in_forward), "--shard-update updates each bucket beside backward; "
               "--update-in-forward places the same updates in the next forward: choose one");
  VITDDP_CHECK(!shard_update || grad_as_bucket_view, "--shard-update updates each bucket's part of the gradient "
               "buffer in place: it needs --grad-as-bucket-view");
  VITDDP_CHECK(!(shard_update && host_copy_allreduce), "--shard-update reduce-scatters and all-gathers through "
               "NCCL; --host-copy-allreduce carries all-reduces only: choose one");
  VITDDP_CHECK(gemm_candidates >= 1 && gemm_candidates <= 256, "--gemm-candidates must be in [1, 256], got ",
               gemm_candidates);
  VITDDP_CHECK(print_every >= 0, "--print-every must be >= 0, got ", print_every);
  profile_range();  // validates the format
  VITDDP_CHECK(checkpoint_every >= 0, "--checkpoint-every must be >= 0, got ", checkpoint_every);
  VITDDP_CHECK(checkpoint_keep >= 1 && checkpoint_keep <= 1000000, "--checkpoint-keep must be in [1, 1000000], got ",
               checkpoint_keep);
  VITDDP_CHECK(!(checkpoint_every > 0 || resume) || !checkpoint_dir.empty(), "--checkpoint-every and --resume need --checkpoint-dir");
}

std::vector<double> TrainConfig::early_bucket_mbs() const {
  std::vector<double> sizes;
  if (early_bucket_mb.empty()) return sizes;
  const std::string bad_list = "--early-bucket-mb must be sizes in MB in [1e-06, 1e6], comma-separated (\"10,25\"), "
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
               "--profile-steps must be A:B with 1 <= A <= B, got '", profile_steps, "'");
  return {a, b};
}

bool parse_train_config(int argc, char** argv, TrainConfig* config) {
  std::string config_file = find_config_flag(argc, argv);
  if (!config_file.empty()) load_json_config(config_file, *config);
  config->config_file = config_file;

  CLI::App app{"vitddp train: data-parallel ViT training on synthetic images"};
  app.set_config();  // no CLI11 config files: --config is ours (JSON)
  app.add_option("--config", config->config_file, "JSON config file (configs/*.json); flags override it")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (const auto& spec : option_table(*config)) {
    std::string flag = std::string("--") + spec.name;
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>) {
            app.add_flag(flag, *p, spec.help);
          } else {
            // The last occurrence wins, so a flag can override an earlier one (or a script's).
            app.add_option(flag, *p, spec.help)
                ->capture_default_str()
                ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
          }
        },
        spec.field);
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
    throw Error(e.what());
  }
  config->validate();
  return true;
}

}  // namespace vitddp
