// `train bench transfer [--provider tcp|shm] [--repeats N] [training flags]`: moves a training
// run's state (parameters, optimizer state and PowerSGD state, the tensors a checkpoint holds,
// as they lie in memory after one step of the run the training flags describe) from one process
// to another's memory through the transfer engine (distributed/transfer/fabric_engine.h): one
// list of writes, a write per tensor, into one packed replica, the way memory checkpoints go to
// a buddy. Beside it, the same bytes from one contiguous buffer as a plain loop of fi_writes on
// the same provider and connection (FabricEngine::write_contiguous_loop): the engine's GB/s
// against the provider's.
//
//   train bench transfer --model vit_l_32 --optimizer adamw --hook powersgd --provider shm
//   # two hosts (or network namespaces), one launcher each, Gloo's address for the engine too:
//   VITDDP_GLOO_HOST=10.0.0.1 train bench transfer --nnodes 2 --rendezvous DIR ...
//
// Two ranks: rank 0 trains one step and sends, rank 1 holds the replica and checks, by CRC-32,
// that every byte of every tensor arrived. Times are medians over --repeats, interleaved.
#pragma once

namespace vitddp::bench {

int run_bench_transfer(int argc, char** argv);

}  // namespace vitddp::bench
