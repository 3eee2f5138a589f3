// TrainConfig: every setting of a run, from defaults, then a JSON config file, then the command
// line. One table of options (config.cpp) drives the flags, the JSON keys and both help texts,
// so they can never disagree; unknown keys and wrong types are errors.
//
// Two kinds of settings. Public flags (`train --help`, about 35) are what a user decides: where,
// the model, the data, the optimisation, the data-parallel hook and buckets, state and output.
// Expert keys (`train --help-expert`) are everything else: the program chooses them from what it
// detects and what was measured (train/auto_settings.h), and a config file or `--set KEY=VALUE`
// overrides the choice. A key the user gave is never changed by the program (`given`).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace vitddp {

// The values of the expert key cpu-allreduce (and the all-reduce bench's --cpu-allreduce), in the
// order of ProcessGroupOptions::CpuAllreduce (train/cpu_allreduce_choice.h maps them).
const std::vector<std::string>& cpu_allreduce_names();
// Those names as a user reads them: "gloo, ring or bypass-ring".
std::string cpu_allreduce_choices();

// Samples a synthetic dataset may hold: the sampler keeps an index per sample (8 GB at this size).
constexpr int64_t kMaxDatasetSize = 1000000000;
// The synthetic datasets' size unless set: ImageNet-1k's training set, so that a run's images
// depend on the seed and the step, never on how many steps it was asked for.
constexpr int64_t kDefaultDatasetSize = 1281167;

struct TrainConfig {
  // where
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  int gpus = 0;                 // 0: not asked; N: train on N GPUs (one process each)
  int procs = 0;                // 0: not asked; N: data-parallel on N CPU processes (Gloo)
  int nnodes = 1;               // hosts, one launcher each, meeting at --rendezvous
  int node_rank = -1;           // expert: this host's place; -1: the order of arrival at the rendezvous
  double join_timeout = 600.0;  // expert: seconds a restart waits for a lost host's place to be taken
  std::string rendezvous;       // the launchers' shared folder when nnodes > 1
  bool ddp = false;             // expert: DDP (process group + reducer) even on one process
  // model
  std::string model = "auto";   // auto: vit_l_32 on a GPU, vit_tiny on the CPU
  int64_t image_size = 0, patch_size = 0, layers = 0, heads = 0, hidden_dim = 0, mlp_dim = 0, classes = 0;  // expert
  double dropout = 0.0;
  std::string init_from;        // safetensors with torchvision names
  // data
  std::string data = "synthetic";  // synthetic | learnable | gpu | PATH.safetensors | image folder | tar shards
  std::string eval_data;           // held-out images, as --data ("": no evaluation)
  int64_t eval_every = 0;          // steps between evaluations (0: only at the end)
  int64_t dataset_size = kDefaultDatasetSize;  // expert: samples of the synthetic datasets
  int workers = 4;                 // expert: loader threads (chosen from the CPUs unless given)
  double crop_min_scale = 0.08;    // expert: the train crop's smallest area share (torchvision's RandomResizedCrop)
  bool random_flip = true;         // expert: the train preset's horizontal flip
  double bad_sample_limit = 0.01;  // expert: share of the samples that may be bad before the run stops
  int64_t batch_size = 32;
  // optimisation
  int64_t steps = 25;              // optimizer steps in all
  int64_t untimed_steps = 5;       // expert: the first steps of a process the timing leaves out
  std::string optimizer = "sgd";   // sgd | adamw
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool weight_decay_all = false;   // expert: decay every parameter (torchvision); else timm's skips
  std::string lr_schedule = "constant";  // constant | cosine | step (framework/optim/lr_schedule.h)
  int64_t warmup_steps = 0;        // linear warm-up steps
  double warmup_decay = 0.01;      // expert: the warm-up's first rate over --lr (torchvision's lr-warmup-decay)
  double min_lr = 0.0;             // expert: cosine's last rate
  int64_t lr_step_size = 0;        // expert: step: steps between decays (0: a third of the steps after warm-up)
  double lr_gamma = 0.1;           // expert: step: the factor of each decay
  double label_smoothing = 0.0;
  double clip_grad_norm = 0.0;     // 0: no clipping
  double model_ema = 0.0;          // 0: no EMA; else its decay per step
  double mixup_alpha = 0.0;        // 0: no Mixup
  double cutmix_alpha = 0.0;       // 0: no CutMix
  uint64_t seed = 0;
  std::string precision = "fp32";  // fp32 | tf32 | bf16
  int64_t accumulate = 1;          // micro-batches per step (all but the last skip communication)
  std::string nonfinite = "stop";  // a NaN/Inf gradient: stop the run (exit 5) or skip the step
  // data parallelism
  double bucket_mb = 25.0;
  std::string hook = "allreduce";  // allreduce | fp16 | bf16 | powersgd
  int64_t powersgd_rank = 1;
  int64_t powersgd_start_iter = 2;  // steps of plain all-reduce before compressing
  bool grad_as_bucket_view = true;    // expert
  bool static_graph = false;          // expert: accepted, changes nothing
  bool find_unused_parameters = false;
  // data parallelism, expert
  double first_bucket_mb = 1.0;
  std::string early_bucket_mb;     // caps in MB of buckets 1, 2, ..., comma-separated ("": all bucket-mb)
  double tail_bucket_mb = 0;       // the last bucket-mb of gradients in buckets this small (0: off)
  std::string powersgd_error_dtype = "f32";  // f32 | bucket (the gradients' dtype)
  std::string update = "after-backward";  // after-backward | next-forward | sharded (UpdatePlacement)
  double ready_order_share = 1.0;  // next-forward: bytes launched in ready order; the rest first-layers first
  int64_t held_buckets = 0;        // next-forward: buckets after the first sent after all others
  std::string transport = "nccl";  // nccl | host-copy: how GPU all-reduces move
  bool host_copy_overlap = false;  // host-copy: back-to-back all-reduces overlap their copies
  bool host_copy_reduce_beside = false;  // host-copy: the additions on a stream beside the receiving copies
  double timeout = 300.0;          // seconds a collective may take before the run is stopped
  std::string cpu_allreduce = "gloo";  // one of cpu_allreduce_names(): how CPU processes sum f32 buckets
  double bypass_wait_ms = 2.0;     // bypass-ring: how long a rank waits for its predecessor
  // speed
  bool cuda_graph = true;          // GPU: forward, backward and DDP's collectives replayed as one CUDA graph
  bool concurrent_wgrad = true;    // expert: a linear layer's weight gradient on a second stream beside dX
  bool gemm_autotune = true;       // expert: time cuBLASLt's candidates per product shape, keep the fastest
  std::string gemm_cache_dir;      // expert: where those choices are kept ("": $XDG_CACHE_HOME/vitddp or ~/.cache/vitddp)
  // state
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // optimizer steps between saves (0: only on a signal stop)
  int64_t checkpoint_keep = 2;   // expert
  int max_restarts = 0;          // restarts of the ranks after a failure (torchrun's --max-restarts)
  int64_t memory_checkpoint_every = 0;  // expert: steps between memory checkpoints; 0: chosen (with restarts)
  bool resume = false;           // continue from the newest whole checkpoint in checkpoint_dir
  std::string save;              // write trained weights here (safetensors)
  // output
  bool json = false;
  int64_t print_every = 1;
  std::string trace;          // Chrome trace file (train/observe/trace.h); empty: no trace
  std::string profile_steps;  // "A:B": cudaProfilerStart before step A, Stop after step B (1-based)
  bool op_breakdown = false;  // GPU: after the run, one more step timed op by op

  std::string config_file;
  // Keys the user gave (flags, --config, --set), by their flag name without dashes.
  std::set<std::string> given;
  bool is_given(const std::string& key) const { return given.count(key) > 0; }

  // Parsed profile_steps; {0, 0} when not set.
  std::pair<int64_t, int64_t> profile_range() const;
  // Parsed early_bucket_mb, in MB; empty when not set. Throws naming the key on a bad list.
  std::vector<double> early_bucket_mbs() const;

  nlohmann::json to_json() const;
  // Throws vitddp::Error naming the first bad setting.
  void validate() const;
};

// Parses argv (flags and --set override --config FILE, which overrides defaults). Returns false
// when the program should exit 0 at once (--help, --help-expert); throws vitddp::Error on bad input.
bool parse_train_config(int argc, char** argv, TrainConfig* config);
// Applies a JSON config file's text (what --config reads) to `config`; throws vitddp::Error
// starting with `label` on malformed JSON, an unknown key or a wrong type. Does not validate.
void parse_json_config(const std::string& text, const std::string& label, TrainConfig* config);
// Applies one "KEY=VALUE" of --set (any key, public or expert); throws naming it when bad.
void apply_setting(const std::string& key_value, TrainConfig* config);
// Whether `key` is a public flag (shown by --help) rather than an expert key.
bool is_public_flag(const std::string& key);
// The `--help-expert` text: every expert key, its default and its one-line effect.
std::string expert_help();

// Where --save FILE puts the weights' EMA (--model-ema): FILE with ".ema" before ".safetensors".
std::string ema_file_for(const std::string& save);

// Limits train's flags share with the bench subcommands' (one line naming the flag, exit 2).
void check_timeout_flag(double seconds, const char* name = "timeout");  // [0.001, 1e7] seconds
void check_procs_flag(int64_t procs);     // --procs: [0, 1024]

}  // namespace vitddp
