// A fresh folder under the system's temporary directory for one test, removed with everything
// in it when the test ends. The name carries a prefix, the pid and a clock reading, so tests
// running side by side (ctest -j, several processes) never share one.
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

namespace vitddp::testing {

struct TempDir {
  explicit TempDir(const std::string& prefix = "vitddp_test")
      : path(std::filesystem::temp_directory_path() /
             (prefix + "_" + std::to_string(::getpid()) + "_" +
              std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()))) {
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path path;
};

}  // namespace vitddp::testing
