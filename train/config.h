// TrainConfig: every setting of a run, from defaults, then a JSON config file, then flags.
// One table of options (config.cpp) drives both the command line and the JSON keys, so the two
// can never disagree; unknown JSON keys and wrong JSON types are errors.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace CLI {
class App;
}

namespace vitddp {

// Samples a synthetic dataset may hold: the sampler keeps an index per sample (8 GB at this size).
constexpr int64_t kMaxDatasetSize = 1000000000;

struct TrainConfig {
  // where
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  int gpus = 0;                 // 0: not asked; N: train on N GPUs (one process each)
  int procs = 0;                // 0: not asked; N: data-parallel on N CPU processes (Gloo)
  // model
  std::string model = "auto";   // auto: vit_l_32 on a GPU, vit_tiny on the CPU
  int64_t image_size = 0, patch_size = 0, layers = 0, heads = 0, hidden_dim = 0, mlp_dim = 0, classes = 0;
  double dropout = 0.0;
  std::string init_from;        // safetensors with torchvision names
  std::string save;             // write trained weights here (safetensors)
  // data
  std::string data = "synthetic";  // synthetic | learnable | gpu | PATH.safetensors
  int64_t dataset_size = 0;        // 0: (warmup + steps) * batch * world, as the reference (at most kMaxDatasetSize)
  int workers = 4;
  // optimisation
  int64_t batch_size = 32;
  int64_t steps = 20;
  int64_t warmup = 5;
  std::string optimizer = "sgd";  // sgd | adamw
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = 0.0;
  uint64_t seed = 0;
  std::string precision = "fp32";  // fp32 | tf32 | bf16
  // data parallelism
  double bucket_mb = 25.0;
  double first_bucket_mb = 1.0;
  std::string early_bucket_mb;     // DDP: caps in MB of buckets 1, 2, ..., comma-separated ("": all --bucket-mb)
  std::string hook = "allreduce";  // allreduce | fp16 | bf16 | powersgd
  int64_t powersgd_rank = 1;
  int64_t powersgd_start_iter = 2;  // steps of plain all-reduce before compressing
  std::string powersgd_error_dtype = "f32";  // f32 | bucket (the gradients' dtype)
  std::string powersgd_products = "passes";   // passes | gemm
  std::string powersgd_error_settle = "late";  // late | eager
  bool grad_as_bucket_view = true;
  bool static_graph = false;
  bool find_unused_parameters = false;
  bool ddp = false;                // DDP (process group + reducer) even on one process, as DDP on 1 GPU
  int64_t accumulate = 1;          // micro-batches per step (all but the last skip communication)
  bool concurrent_wgrad = true;    // GPU: a linear layer's weight gradient on a second stream beside dX
  int64_t sm_carveout = 0;         // GPU: SMs the matrix products leave to NCCL (its block limit)
  int64_t launch_window = 0;       // GPU: ops the host may queue ahead of the GPU (0: no limit)
  int64_t bind_cpus = 0;           // each rank's training thread held to N CPUs of its own (0: anywhere)
  bool update_in_forward = false;  // DDP: a bucket's update at the next forward's first use of its parameters
  bool update_in_backward = false; // DDP: a bucket's update right after its communication, beside backward
  bool shard_update = false;       // DDP: each rank updates its part of each bucket, the weights all-gathered (ZeRO-1)
  bool host_copy_allreduce = false;  // GPU DDP: all-reduces through shared host memory and the copy engines
  bool host_copy_overlap = false;    // with it: back-to-back all-reduces overlap their copies
  bool host_copy_reduce_beside = false;  // with it: the additions on a stream beside the receiving copies
  bool nccl_register = false;      // GPU DDP: gradients in memory NCCL registers (zero-copy collectives)
  bool cuda_graph = false;         // GPU: forward, backward and DDP's collectives replayed as one CUDA graph
  double ready_order_share = 1.0;  // DDP: bytes launched in ready order; the rest first-layers first
  double tail_bucket_mb = 0;        // DDP: the last --bucket-mb of gradients in buckets this small (0: off)
  int64_t held_buckets = 0;        // DDP: buckets after the first sent after all others (Note [Launch order])
  bool gemm_autotune = true;       // GPU: time cuBLASLt's candidate algorithms per product shape, keep the fastest
  int64_t gemm_candidates = 8;    // GPU: cuBLASLt heuristic candidates --gemm-autotune times per shape
  std::string gemm_cache_dir;      // where those choices are kept ("": $XDG_CACHE_HOME/vitddp or ~/.cache/vitddp)
  double timeout = 300.0;           // seconds a collective may take before the run is stopped
  std::string nonfinite = "stop";  // a NaN/Inf gradient: stop the run (exit 5) or skip the step
  // checkpoints
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // optimizer steps between saves (0: only on a signal stop)
  int64_t checkpoint_keep = 2;
  bool resume = false;           // continue from the newest whole checkpoint in checkpoint_dir
  // output
  bool json = false;
  int64_t print_every = 1;
  bool op_breakdown = false;  // GPU: after the timed steps, one more step timed op by op
  std::string profile_steps;  // "A:B": cudaProfilerStart before step A, Stop after step B (1-based)
  std::string trace;          // Chrome trace file (train/trace.h); empty: no trace
  // Parsed --profile-steps; {0, 0} when not set.
  std::pair<int64_t, int64_t> profile_range() const;
  // Parsed --early-bucket-mb, in MB; empty when not set. Throws naming the flag on a bad list.
  std::vector<double> early_bucket_mbs() const;
  std::string config_file;

  nlohmann::json to_json() const;
  // Throws vitddp::Error naming the first bad setting.
  void validate() const;
};

// Parses argv (flags override --config FILE, which overrides defaults). Returns false when the
// program should exit 0 at once (--help); throws vitddp::Error on bad input.
bool parse_train_config(int argc, char** argv, TrainConfig* config);
// Applies a JSON config file's text (what --config reads) to `config`; throws vitddp::Error
// starting with `label` on malformed JSON, an unknown key or a wrong type. Does not validate.
// Limits train's flags share with the bench subcommands' (one line naming the flag, exit 2).
void check_timeout_flag(double seconds);  // --timeout: [0.001, 1e7] seconds
void check_procs_flag(int64_t procs);     // --procs: [0, 1024]

void parse_json_config(const std::string& text, const std::string& label, TrainConfig* config);

}  // namespace vitddp
