#include "train/device_choice.h"

#include "framework/core/dtype.h"
#include "framework/core/error.h"

namespace vitddp {

// Note [One GPU per rank]
// Every rank of a data-parallel run on GPUs needs a GPU of its own: NCCL refuses two ranks on one
// GPU, and only once they have all started. Our launcher (--gpus N) and an outside one (mpirun,
// srun: the ranks' variables, read by read_rank_environment) both give each rank its local rank,
// so a rank takes the GPU of its local rank, as torchrun's users do with LOCAL_RANK. A rank that
// sees one GPU takes it: srun --gpus-per-task and a CUDA_VISIBLE_DEVICES per rank leave each
// rank one GPU whatever its local rank. A device named for every rank (--device cuda:K) is
// refused where it would put two ranks of a machine on one GPU.
std::string choose_device(const TrainConfig& c, const RankEnvironment& env, int visible,
                          const std::function<std::string()>& describe_gpus, std::ostream& log) {
  std::string device = c.device;
  if (c.procs > 0) {
    VITDDP_CHECK(c.device == "auto" || c.device == "cpu", "--procs ", c.procs, " trains on the CPU; it conflicts with --device ",
                 c.device);
    return "cpu";
  }
  const bool some_ranks = env.distributed && env.world_size > 1;
  if (c.gpus > 0) {
    VITDDP_CHECK(c.device == "auto" || c.device.rfind("cuda", 0) == 0, "--gpus ", c.gpus,
                 " conflicts with --device ", c.device);
    VITDDP_CHECK(c.gpus == 1 || c.device == "auto" || c.device == "cuda", "--gpus ", c.gpus,
                 " gives each rank the GPU of its local rank; --device ", c.device,
                 " would put every rank on one GPU (leave --device out)");
    VITDDP_CHECK(c.gpus <= visible, "--gpus ", c.gpus, " asked for but ", visible, " GPU(s) visible: ", describe_gpus());
    if (device == "auto" || device == "cuda") device = "cuda:" + std::to_string(env.local_rank);
  } else if (some_ranks && (device == "auto" || device == "cuda") && visible > 0) {
    // An outside launcher's ranks without --gpus.
    if (visible == 1) return "cuda:0";
    VITDDP_CHECK(env.local_rank < visible, "rank ", env.rank, " is local rank ", env.local_rank, " of its machine (",
                 env.source, " variables), but this machine shows it only ", visible, " GPU(s): ", describe_gpus(),
                 "; run at most one rank per GPU");
    return "cuda:" + std::to_string(env.local_rank);
  } else if (some_ranks && device.rfind("cuda:", 0) == 0 && visible > 1) {
    VITDDP_CHECK(env.local_rank == 0, "--device ", device, " on every rank puts local ranks 0 to ", env.local_rank,
                 " of this machine on one GPU; leave --device out (each rank takes the GPU of its local rank)");
  }
  if (device == "auto") {
    if (visible > 0) return "cuda:0";
    if (c.model == "auto") log << "note: no GPU visible; training on the CPU with the small vit_tiny model\n";
    return "cpu";
  }
  if (device == "cuda") device = "cuda:0";
  Device d = parse_device(device);
  if (d.is_cuda())
    VITDDP_CHECK(d.index < visible, "device ", d.str(), " asked for but ", visible, " GPU(s) visible: ", describe_gpus());
  return d.str();
}

}  // namespace vitddp
