#include "common/two_hosts.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include <cstdlib>

namespace vitddp::testing {

TwoHosts::TwoHosts() {
  const std::string id = std::to_string(::getpid());
  subnet_ = "10.213." + std::to_string(::getpid() % 250);
  for (int h = 0; h < 2; ++h) names_[h] = "vitddp-" + id + "-" + std::to_string(h);
  const std::string veth0 = "vd" + id + "a", veth1 = "vd" + id + "b";  // at most 15 characters
  const std::string script =
      "set -e; ip netns add " + names_[0] + "; ip netns add " + names_[1] + "; ip link add " + veth0 +
      " type veth peer name " + veth1 + "; ip link set " + veth0 + " netns " + names_[0] + "; ip link set " + veth1 +
      " netns " + names_[1] + "; ip -n " + names_[0] + " addr add " + address(0) + "/24 dev " + veth0 + "; ip -n " +
      names_[1] + " addr add " + address(1) + "/24 dev " + veth1 + "; for n in " + names_[0] + " " + names_[1] +
      "; do ip -n $n link set lo up; done; ip -n " + names_[0] + " link set " + veth0 + " up; ip -n " + names_[1] +
      " link set " + veth1 + " up";
  made_ = ::geteuid() == 0 && std::system(("(" + script + ") > /dev/null 2>&1").c_str()) == 0;
  if (!made_) remove();
}

TwoHosts::~TwoHosts() { remove(); }

std::string TwoHosts::address(int host) const { return subnet_ + "." + std::to_string(host + 1); }

std::string TwoHosts::on(int host, const std::string& env) const {
  return env + " VITDDP_GLOO_HOST=" + address(host) + " ip netns exec " + names_[host];
}

std::vector<int> TwoHosts::kill_all(int host) const {
  std::vector<int> pids;
  FILE* p = ::popen(("ip netns pids " + names_[host] + " 2> /dev/null").c_str(), "r");
  if (!p) return pids;
  for (int pid; std::fscanf(p, "%d", &pid) == 1;) pids.push_back(pid);
  ::pclose(p);
  for (int pid : pids) ::kill(pid, SIGKILL);
  return pids;
}

void TwoHosts::remove() {
  for (const std::string& n : names_)
    if (!n.empty()) std::system(("ip netns del " + n + " > /dev/null 2>&1").c_str());
}

}  // namespace vitddp::testing
