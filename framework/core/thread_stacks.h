// Every thread's call stack of this process, written as text: what a hang report needs when no
// debugger can attach (the GPU machine has no gdb). Linux only; elsewhere it writes one line
// saying so.
//
// Each other thread is interrupted in turn by a real-time signal whose handler unwinds its own
// stack (glibc backtrace, through .eh_frame, so CUDA's and NCCL's stripped libraries unwind
// too) and writes it. Frames show as "library(symbol+offset)" or "library(+offset)": resolve
// the latter with `addr2line -f -C -e library offset` (scripts/ce_hang_stacks.sh does). A thread
// that cannot take the signal within a second (blocked in the kernel with signals masked) is
// named and skipped.
#pragma once

namespace vitddp {

// Writes a header line per thread ("thread TID (NAME)"), then its frames, to the file
// descriptor. Safe to call from any ordinary thread, while others are stuck; one dump at a time.
void write_thread_stacks(int fd);

// From now on SIGUSR2 sent to this process writes write_thread_stacks(2) (standard error), from
// a helper thread, and the process carries on. Idempotent.
void dump_thread_stacks_on_sigusr2();

}  // namespace vitddp
