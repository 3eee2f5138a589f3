#include "train/cpu_allreduce_choice.h"

#include <algorithm>

#include "framework/core/error.h"
#include "train/config.h"

namespace vitddp {

ProcessGroupOptions::CpuAllreduce cpu_allreduce_from_name(const std::string& name) {
  const std::vector<std::string>& names = cpu_allreduce_names();
  const auto it = std::find(names.begin(), names.end(), name);
  VITDDP_CHECK(it != names.end(), "cpu-allreduce must be ", cpu_allreduce_choices(), ", got '", name, "'");
  return static_cast<ProcessGroupOptions::CpuAllreduce>(it - names.begin());
}

}  // namespace vitddp
