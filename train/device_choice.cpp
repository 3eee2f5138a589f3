#include "train/device_choice.h"

#include "framework/core/dtype.h"
#include "framework/core/error.h"

#if VITDDP_WITH_CUDA
#include "framework/cuda/device.h"
#endif

namespace vitddp {

std::string describe_visible_gpus() {
#if VITDDP_WITH_CUDA
  std::string out;
  for (const std::string& d : cuda::describe_devices()) out += (out.empty() ? "" : "; ") + d;
  return out.empty() ? "none" : out;
#else
  return "none (this build has no CUDA backend)";
#endif
}

// Note [One GPU per rank]
// Every rank of a data-parallel run on GPUs needs a GPU of its own: NCCL refuses two ranks on one
// GPU, and only once they have all started. Our launcher (--gpus N) and an outside one (mpirun,
// srun: the ranks' variables, read by read_rank_environment) both give each rank its local rank,
// so a rank takes the GPU of its local rank, as torchrun's users do with LOCAL_RANK. A rank that
// sees one GPU takes it: srun --gpus-per-task and a CUDA_VISIBLE_DEVICES per rank leave each
// rank one GPU whatever its local rank (two ranks of a machine that see the same single GPU are
// not told apart here; NCCL refuses them). Where the launcher names no local rank (RANK and
// WORLD_SIZE alone, as with one rank per machine), a rank takes cuda:0. A device named on a rank
// (--device cuda:K) is taken as named: a rank cannot tell a per-rank choice (cuda:$LOCAL_RANK,
// or an MPMD line per rank) from one name for all, which NCCL then refuses.
int rank_gpu(const RankEnvironment& env, int visible, const std::function<std::string()>& describe_gpus) {
  if (!(env.distributed && env.world_size > 1 && env.local_rank_set) || visible == 1) return 0;
  VITDDP_CHECK(env.local_rank < visible, "local rank ", env.local_rank, " (", env.source,
               " variables) has no GPU of its own: this machine shows ", visible, " (", describe_gpus(),
               "); run at most one rank per GPU");
  return env.local_rank;
}

std::string choose_device(const TrainConfig& c, const RankEnvironment& env, int visible,
                          const std::function<std::string()>& describe_gpus, std::ostream& log) {
  std::string device = c.device;
  if (c.procs > 0) {
    VITDDP_CHECK(c.device == "auto" || c.device == "cpu", "--procs ", c.procs, " trains on the CPU; it conflicts with --device ",
                 c.device);
    return "cpu";
  }
  if (c.gpus > 0) {
    VITDDP_CHECK(c.device == "auto" || c.device.rfind("cuda", 0) == 0, "--gpus ", c.gpus,
                 " conflicts with --device ", c.device);
    VITDDP_CHECK(c.gpus == 1 || c.device == "auto" || c.device == "cuda", "--gpus ", c.gpus,
                 " gives each rank the GPU of its local rank; --device ", c.device,
                 " would put every rank on one GPU (leave --device out)");
    VITDDP_CHECK(c.gpus <= visible, "--gpus ", c.gpus, " asked for but ", visible, " GPU(s) visible: ", describe_gpus());
    if (device == "auto" || device == "cuda") device = "cuda:" + std::to_string(env.local_rank);
  } else if ((device == "auto" || device == "cuda") && visible > 0) {
    return "cuda:" + std::to_string(rank_gpu(env, visible, describe_gpus));
  }
  if (device == "auto") {
    if (c.model == "auto") log << "note: no GPU visible; training on the CPU with the small vit_tiny model\n";
    return "cpu";
  }
  const Device d = parse_device(device == "cuda" ? "cuda:0" : device);
  if (d.is_cuda())
    VITDDP_CHECK(d.index < visible, "device ", d.str(), " asked for but ", visible, " GPU(s) visible: ", describe_gpus());
  return d.str();
}

}  // namespace vitddp
