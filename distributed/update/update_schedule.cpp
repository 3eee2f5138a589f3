#include "distributed/update/update_schedule.h"

#include "framework/core/error.h"

namespace vitddp {

UpdatePlacement parse_update_placement(const std::string& name) {
  if (name == "after-backward") return UpdatePlacement::kAfterBackward;
  if (name == "next-forward") return UpdatePlacement::kNextForward;
  if (name == "sharded") return UpdatePlacement::kSharded;
  throw Error("update must be after-backward, next-forward or sharded, got '" + name + "'");
}

const char* update_placement_name(UpdatePlacement placement) {
  switch (placement) {
    case UpdatePlacement::kAfterBackward: return "after-backward";
    case UpdatePlacement::kNextForward: return "next-forward";
    case UpdatePlacement::kSharded: return "sharded";
  }
  return "";
}

}  // namespace vitddp
