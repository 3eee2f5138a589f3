"""All-reduce bandwidth through torch.distributed (NCCL), two processes on two GPUs, under
whatever NCCL environment the caller sets: the PyTorch side of scripts/shm_ce_probe.sh.
Prints one line per size: median time over 20 iterations after 5 (CUDA events), busbw.
Data is random (never zeros); the result is checked against the exact sum."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, sizes_mb, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    for mb in sizes_mb:
        n = int(mb * 1e6) // 4
        g = torch.Generator(device="cuda").manual_seed(1234 + rank)
        x = torch.randint(-8, 8, (n,), device="cuda", generator=g).float()
        expect = sum(torch.randint(-8, 8, (n,), device="cuda",
                                   generator=torch.Generator(device="cuda").manual_seed(1234 + r)).float()
                     for r in range(world))
        times = []
        for it in range(25):
            y = x.clone()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dist.all_reduce(y)
            stop.record()
            torch.cuda.synchronize()
            if it >= 5:
                times.append(start.elapsed_time(stop))
        ok = torch.equal(y, expect)
        times.sort()
        ms = times[len(times) // 2]
        busbw = n * 4 * 2 * (world - 1) / world / (ms * 1e-3) / 1e9
        if rank == 0:
            print(f"torch all-reduce f32 {mb:8.1f} MB: {ms:8.3f} ms, busbw {busbw:6.1f} GB/s, {'ok' if ok else 'WRONG'}",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sizes = [float(s) for s in (sys.argv[1:] or ["64", "1226"])]
    mp.spawn(worker, args=(2, sizes, 29500 + os.getpid() % 1000), nprocs=2)
