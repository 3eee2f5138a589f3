// write_thread_stacks and the SIGUSR2 dump: every thread of the process is listed by id and
// name with at least one frame, including a thread parked in a wait, and the process goes on.
#include "framework/core/thread_stacks.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

namespace vitddp {
namespace {

// A thread parked in a condition-variable wait (as a rank's helper threads sit in a hang).
class ParkedThread {
 public:
  ParkedThread() {
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "stacks-probe");
      tid_.store(static_cast<long>(syscall(SYS_gettid)));
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return release_; });
    });
    while (tid_.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~ParkedThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      release_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  long tid() const { return tid_.load(); }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool release_ = false;
  std::atomic<long> tid_{0};
  std::thread thread_;
};

class TempFile {
 public:
  TempFile() {
    char name[] = "/tmp/vitddp_stacks_XXXXXX";
    fd_ = mkstemp(name);
    path_ = name;
  }
  ~TempFile() {
    close(fd_);
    std::remove(path_.c_str());
  }
  int fd() const { return fd_; }
  std::string text() const {
    std::ifstream in(path_);
    std::stringstream all;
    all << in.rdbuf();
    return all.str();
  }

 private:
  int fd_ = -1;
  std::string path_;
};

// Checks the dump's shape: the header's count of threads, one "thread TID (NAME)" line each,
// each followed by frames ("[0x...]"), and the end line.
void expect_complete_dump(const std::string& text, long parked_tid) {
  std::smatch header;
  ASSERT_TRUE(std::regex_search(text, header, std::regex("stacks of process (\\d+), (\\d+) threads\n"))) << text;
  EXPECT_EQ(std::stol(header[1]), static_cast<long>(getpid()));
  const int threads = std::stoi(header[2]);
  EXPECT_GE(threads, 2);
  const std::regex thread_block("thread (\\d+) \\(([^)]*)\\)\n((?:[^\n]*\\[0x[0-9a-f]+\\]\n)+)");
  int blocks = 0;
  bool saw_parked = false;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), thread_block); it != std::sregex_iterator(); ++it) {
    ++blocks;
    if (std::stol((*it)[1]) == parked_tid) {
      saw_parked = true;
      EXPECT_EQ((*it)[2].str(), "stacks-probe");
    }
  }
  EXPECT_EQ(blocks, threads) << text;
  EXPECT_TRUE(saw_parked) << "thread " << parked_tid << " missing from:\n" << text;
  EXPECT_NE(text.find("end of stacks\n"), std::string::npos);
}

TEST(ThreadStacks, WritesEveryThreadWithFrames) {
  ParkedThread parked;
  TempFile out;
  write_thread_stacks(out.fd());
  expect_complete_dump(out.text(), parked.tid());
  // A second dump works too (the handler stays installed, the answer bookkeeping resets).
  TempFile again;
  write_thread_stacks(again.fd());
  expect_complete_dump(again.text(), parked.tid());
}

TEST(ThreadStacks, Sigusr2WritesToStandardErrorAndTheProcessGoesOn) {
  ParkedThread parked;
  dump_thread_stacks_on_sigusr2();
  TempFile out;
  std::fflush(stderr);
  const int saved_stderr = dup(2);
  ASSERT_GE(saved_stderr, 0);
  ASSERT_GE(dup2(out.fd(), 2), 0);
  ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (out.text().find("end of stacks\n") == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  dup2(saved_stderr, 2);
  close(saved_stderr);
  expect_complete_dump(out.text(), parked.tid());
}

}  // namespace
}  // namespace vitddp
