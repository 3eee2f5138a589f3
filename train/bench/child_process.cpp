// Runs one program for a sweep. See train/bench/child_process.h.
#include "train/bench/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "framework/core/error.h"

namespace vitddp::bench {
namespace {

std::string last_nonempty_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) last = line;
  }
  if (last.size() > 300) last = last.substr(0, 297) + "...";
  return last;
}

bool shell_safe(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_./=:,+@%", c))) return false;
  return true;
}

std::string shell_quote(const std::string& s) {
  if (shell_safe(s)) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string shell_command(const std::vector<std::pair<std::string, std::string>>& env,
                          const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& [name, value] : env) out += name + "=" + shell_quote(value) + " ";
  for (size_t i = 0; i < argv.size(); ++i) out += (i ? " " : "") + shell_quote(argv[i]);
  return out;
}

ChildResult run_child(const ChildOptions& options) {
  VITDDP_ASSERT(!options.argv.empty(), "run_child needs a program");
  const int log_fd = ::open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  VITDDP_CHECK(log_fd >= 0, "cannot write ", options.stderr_path, " (", std::strerror(errno), ")");
  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    ::close(log_fd);
    throw Error(std::string("cannot create a pipe: ") + std::strerror(errno), ErrorKind::kInternal);
  }
  // Everything the child needs is built before fork: it only calls async-signal-safe functions
  // (and setenv, safe here because this process runs one thread while it starts children).
  std::vector<char*> args;
  for (const std::string& a : options.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    throw Error(std::string("fork failed: ") + std::strerror(errno), ErrorKind::kInternal);
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    for (const auto& [name, value] : options.env) ::setenv(name.c_str(), value.c_str(), 1);
    ::execvp(args[0], args.data());
    const char* why = std::strerror(errno);
    (void)!::write(STDERR_FILENO, "cannot start ", 13);
    (void)!::write(STDERR_FILENO, args[0], std::strlen(args[0]));
    (void)!::write(STDERR_FILENO, ": ", 2);
    (void)!::write(STDERR_FILENO, why, std::strlen(why));
    (void)!::write(STDERR_FILENO, "\n", 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so a signal below cannot race the child's own call
  ::close(out_pipe[1]);
  ::close(log_fd);

  ChildResult result;
  const auto deadline = start + options.time_limit;
  auto kill_at = std::chrono::steady_clock::time_point::max();
  bool pipe_open = true, reaped = false, sent_kill = false;
  int status = 0;
  char buf[4096];
  while (pipe_open || !reaped) {
    const auto now = std::chrono::steady_clock::now();
    const bool stop_asked = options.stop_request && options.stop_request->load() != 0;
    if (kill_at == std::chrono::steady_clock::time_point::max() && (now >= deadline || stop_asked)) {
      (now >= deadline ? result.timed_out : result.stopped) = true;
      ::kill(-pid, SIGTERM);  // `train` stops its ranks at a step boundary
      kill_at = now + options.grace;
    }
    if (!sent_kill && now >= kill_at) {
      ::kill(-pid, SIGKILL);
      sent_kill = true;
    }
    if (pipe_open) {
      pollfd p{out_pipe[0], POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        const ssize_t n = ::read(out_pipe[0], buf, sizeof(buf));
        if (n > 0) result.out.append(buf, static_cast<size_t>(n));
        else if (n == 0 || (errno != EINTR && errno != EAGAIN)) pipe_open = false;
      }
    } else {
      ::usleep(20 * 1000);
    }
    if (!reaped) {
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid || (r < 0 && errno == ECHILD)) reaped = true;
    }
  }
  ::close(out_pipe[0]);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.last_error_line = last_nonempty_line(options.stderr_path);
  return result;
}

}  // namespace vitddp::bench
