// Two network namespaces joined by a veth pair, standing for two hosts in tests: their own
// interfaces and addresses (Gloo's TCP and the transfer engine's between them). Making them
// needs root (CI runs as root); made() says whether it worked.
#pragma once

#include <string>
#include <vector>

namespace vitddp::testing {

// Namespaces "vitddp-<pid>-0/1" with addresses 10.213.<pid % 250>.1 and .2; removed with the object.
class TwoHosts {
 public:
  TwoHosts();
  ~TwoHosts();
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;
  bool made() const { return made_; }
  std::string address(int host) const;
  // run_train's `env` for a command on `host`: VITDDP_GLOO_HOST is the host's own address.
  std::string on(int host, const std::string& env = "") const;
  // SIGKILLs every process in `host`'s namespace (a host lost whole); returns their pids.
  std::vector<int> kill_all(int host) const;

 private:
  void remove();
  std::string names_[2], subnet_;
  bool made_ = false;
};

}  // namespace vitddp::testing

#define REQUIRE_TWO_HOSTS(hosts) \
  if (!(hosts).made()) GTEST_SKIP() << "cannot make network namespaces here (needs root and iproute2)"
