// The python3 the parity tests run under (tests/python/*.py):
// VITDDP_PYTHON is the first of -DVITDDP_PYTHON, /usr/bin/python3 and python3 on PATH that
// imported numpy, torch and torchvision when CMake configured the build
// (cmake/Dependencies.cmake), or empty when none did; then the parity tests skip.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#define VITDDP_REQUIRE_PARITY_PYTHON()                                                                        \
  do {                                                                                                        \
    if (std::string(VITDDP_PYTHON).empty())                                                                   \
      GTEST_SKIP() << "no python3 that imports numpy, torch and torchvision was found at configure time "     \
                      "(tried -DVITDDP_PYTHON, /usr/bin/python3, python3 on PATH); configure with "           \
                      "-DVITDDP_PYTHON=/path/to/python3 to run the torchvision parity tests";                 \
  } while (0)

namespace vitddp::testing {

// Runs the python script at `path` with `args` under VITDDP_PYTHON: "OK\n" or "FAILED\n", then
// its output (stdout and stderr).
inline std::string run_script(const std::string& path, const std::string& args) {
  const std::string cmd = std::string(VITDDP_PYTHON) + " " + path + " " + args + " 2>&1";
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return "FAILED\npopen failed: " + cmd;
  char buf[512];
  while (fgets(buf, sizeof buf, pipe)) out += buf;
  const int status = pclose(pipe);
  return (status == 0 ? "OK\n" : "FAILED\n") + out;
}

// tests/python/SCRIPT, as run_script.
inline std::string run_parity_script(const std::string& script, const std::string& args) {
  return run_script(std::string(VITDDP_SOURCE_DIR) + "/tests/python/" + script, args);
}

// scikit-learn's digits as JPEG folders under `dir` (and tar shards with "--shards N"):
// scripts/make_digits_dataset.py, as run_script.
inline std::string make_digits_dataset(const std::string& dir, const std::string& args = "") {
  return run_script(std::string(VITDDP_SOURCE_DIR) + "/scripts/make_digits_dataset.py", dir + " " + args);
}

}  // namespace vitddp::testing
