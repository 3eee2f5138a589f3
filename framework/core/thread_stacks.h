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
// descriptor, the whole dump in one write where it can (collected in an anonymous file first),
// so that two processes dumping into one log do not interleave. Safe to call from any ordinary
// thread while others are stuck; one dump at a time. Interrupted system calls of the signalled
// threads return EINTR (the handler uses SA_RESTART, but poll and sleeps return early anyway).
void write_thread_stacks(int fd);

// Installs the signal handler and loads the unwinder now, so that a later dump (in a stall)
// does neither. Idempotent; write_thread_stacks does it too.
void prepare_thread_stacks();

// From now on SIGUSR2 sent to this process writes write_thread_stacks(2) (standard error), from
// a helper thread, and the process carries on. Idempotent. A diagnosis tool, not free: besides
// the early returns above, a thread caught inside the unwinder itself (an exception being
// thrown) could wait forever on the unwinder's lock.
void dump_thread_stacks_on_sigusr2();

}  // namespace vitddp
