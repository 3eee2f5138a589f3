#include "framework/core/thread_stacks.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#if defined(__linux__)
#include <dirent.h>
#include <execinfo.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

namespace vitddp {

#if defined(__linux__)
namespace {

constexpr int kMaxFrames = 64;
constexpr auto kAnswerWait = std::chrono::seconds(1);

// The dump in progress: where the handlers write, the one thread asked to write now (a late
// answer from an earlier one writes nothing), and which thread answered last.
std::atomic<int> g_fd{2};
std::atomic<long> g_target{0};
std::atomic<long> g_answered{0};
std::mutex g_dump_mutex;

// Everything below runs inside a signal handler too: write(2) only, no allocation, no stdio.
void write_all(int fd, const char* text, size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, text, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;
    text += written;
    size -= static_cast<size_t>(written);
  }
}

void write_text(int fd, const char* text) { write_all(fd, text, std::strlen(text)); }

// Appends text to a fixed buffer (no allocation): a header line goes out in one write.
struct Line {
  char text[160];
  size_t size = 0;
  void add(const char* part) {
    for (; *part && size < sizeof(text) - 1; ++part) text[size++] = *part;
  }
  void add(long value) {
    char digits[24];
    size_t at = sizeof(digits);
    unsigned long rest = value < 0 ? 0UL - static_cast<unsigned long>(value) : static_cast<unsigned long>(value);
    do {
      digits[--at] = static_cast<char>('0' + rest % 10);
      rest /= 10;
    } while (rest != 0);
    if (value < 0) digits[--at] = '-';
    for (; at < sizeof(digits) && size < sizeof(text) - 1; ++at) text[size++] = digits[at];
  }
};

void write_number(int fd, long value) {
  Line line;
  line.add(value);
  write_all(fd, line.text, line.size);
}

long this_thread_id() { return static_cast<long>(syscall(SYS_gettid)); }


void write_own_stack(int fd) {
  void* frames[kMaxFrames];
  const int count = backtrace(frames, kMaxFrames);
  char name[17] = {};
  prctl(PR_GET_NAME, name, 0, 0, 0);
  Line header;
  header.add("thread ");
  header.add(this_thread_id());
  header.add(" (");
  header.add(name);
  header.add(")\n");
  write_all(fd, header.text, header.size);
  backtrace_symbols_fd(frames, count, fd);
}

void on_stack_signal(int) {
  const int saved_errno = errno;
  const long self = this_thread_id();
  if (g_target.load() == self) {
    write_own_stack(g_fd.load());
    g_answered.store(self);
  }
  errno = saved_errno;
}

// A real-time signal nothing else in the process uses (glibc keeps the first ones for itself
// and SIGRTMIN already skips them).
int stack_signal() { return SIGRTMIN + 4; }

void install_stack_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    // backtrace() loads libgcc's unwinder on first use (malloc, dlopen): do it here, not in a handler.
    void* warm[1];
    backtrace(warm, 1);
    struct sigaction action {};
    action.sa_handler = on_stack_signal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(stack_signal(), &action, nullptr);
  });
}

std::vector<long> thread_ids() {
  std::vector<long> ids;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return ids;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    ids.push_back(std::strtol(entry->d_name, nullptr, 10));
  }
  closedir(dir);
  return ids;
}

sem_t g_request;

void on_dump_request(int) { sem_post(&g_request); }  // async-signal-safe

// Copies what was written to `from` (from its start) to `to`, in as few writes as it takes:
// one, usually, so that two processes dumping into one log at once do not interleave.
void copy_out(int from, int to) {
  std::string text;
  char chunk[1 << 16];
  if (lseek(from, 0, SEEK_SET) != 0) return;
  for (ssize_t got; (got = ::read(from, chunk, sizeof(chunk))) != 0;) {
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) break;
    text.append(chunk, static_cast<size_t>(got));
  }
  write_all(to, text.data(), text.size());
}

}  // namespace

void prepare_thread_stacks() { install_stack_handler(); }

void write_thread_stacks(int fd) {
  std::lock_guard<std::mutex> lock(g_dump_mutex);
  install_stack_handler();
  // The handlers write into an anonymous file first; the whole dump then goes out at once.
  const int staging = static_cast<int>(syscall(SYS_memfd_create, "vitddp-stacks", 0));
  const int out = staging >= 0 ? staging : fd;
  g_fd.store(out);
  const long self = this_thread_id();
  const std::vector<long> ids = thread_ids();
  write_text(out, "stacks of process ");
  write_number(out, static_cast<long>(getpid()));
  write_text(out, ", ");
  write_number(out, static_cast<long>(ids.size()));
  write_text(out, " threads\n");
  for (long id : ids) {
    if (id == self) {
      write_own_stack(out);
      continue;
    }
    g_answered.store(0);
    g_target.store(id);
    if (syscall(SYS_tgkill, static_cast<long>(getpid()), id, stack_signal()) != 0) continue;  // it has ended
    const auto deadline = std::chrono::steady_clock::now() + kAnswerWait;
    while (g_answered.load() != id && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (g_answered.load() != id) {
      g_target.store(0);  // a late answer writes nothing
      write_text(out, "thread ");
      write_number(out, id);
      write_text(out, ": no answer within 1 s (signals blocked, or stuck in the kernel)\n");
    }
  }
  g_target.store(0);
  write_text(out, "end of stacks\n");
  if (staging >= 0) {
    copy_out(staging, fd);
    close(staging);
  }
}

void dump_thread_stacks_on_sigusr2() {
  static std::once_flag once;
  std::call_once(once, [] {
    install_stack_handler();
    sem_init(&g_request, 0, 0);
    std::thread([] {
      while (true) {
        if (sem_wait(&g_request) != 0) continue;  // EINTR
        write_thread_stacks(2);
      }
    }).detach();
    struct sigaction action {};
    action.sa_handler = on_dump_request;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(SIGUSR2, &action, nullptr);
  });
}

#else  // not Linux

void write_thread_stacks(int fd) {
  static const char kText[] = "thread stacks are only written on Linux\n";
  (void)!::write(fd, kText, sizeof(kText) - 1);
}

void dump_thread_stacks_on_sigusr2() {}
void prepare_thread_stacks() {}

#endif

}  // namespace vitddp
