// The python3 the torchvision parity tests run under (tests/models/torchvision_parity.py):
// VITDDP_PYTHON is the first of -DVITDDP_PYTHON, /usr/bin/python3 and python3 on PATH that
// imported numpy, torch and torchvision when CMake configured the build
// (cmake/Dependencies.cmake), or empty when none did; then the parity tests skip.
#pragma once

#include <gtest/gtest.h>

#include <string>

#define VITDDP_REQUIRE_PARITY_PYTHON()                                                                        \
  do {                                                                                                        \
    if (std::string(VITDDP_PYTHON).empty())                                                                   \
      GTEST_SKIP() << "no python3 that imports numpy, torch and torchvision was found at configure time "     \
                      "(tried -DVITDDP_PYTHON, /usr/bin/python3, python3 on PATH); configure with "           \
                      "-DVITDDP_PYTHON=/path/to/python3 to run the torchvision parity tests";                 \
  } while (0)
