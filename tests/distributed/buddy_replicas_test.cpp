// Buddy replicas (distributed/transfer/buddy_replicas.h) between a node's service and its buddy's,
// as two processes on the loopback: a push cut short by the sender's death (SIGKILL while the
// buddy receives a 512 MB step) leaves the buddy's previous replica whole, and a replacement of
// the lost node is handed that one back, byte for byte, by a buddy whose engine lost a peer.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "common/multiprocess.h"
#include "distributed/file_store.h"
#if VITDDP_WITH_LIBFABRIC
#include "distributed/transfer/buddy_replicas.h"
#endif

namespace vitddp {
namespace {

#if VITDDP_WITH_LIBFABRIC
using transfer::BuddyReplicaOptions;
using transfer::BuddyReplicas;

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&s[i], &v, std::min<size_t>(8, n - i));
  }
  return s;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A memory checkpoint folder of one rank (rank 1, node 1): the tensors file, then its record.
void write_step(const std::string& folder, const std::string& step, const std::string& tensors,
                const std::string& record) {
  std::filesystem::create_directories(folder + "/" + step);
  write_file(folder + "/" + step + "/rank-1.safetensors", tensors);
  write_file(folder + "/" + step + "/rank-1.json", record);
}

// The store's value of `key` once it equals `want`, within `seconds`.
bool store_reaches(FileStore& store, const std::string& key, const std::string& want, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (store.has(key) && store.get(key, std::chrono::seconds(1)) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST(BuddyReplicas, APushCutShortLeavesThePreviousReplicaWhole) {
  testing::TempFolder dir("vitddp_buddy");
  const std::string node0 = dir.path() + "/node0", node1 = dir.path() + "/node1", again = dir.path() + "/node1-new";
  for (const std::string& f : {node0, node1, again}) std::filesystem::create_directories(f);
  write_file(node0 + "/RANKS", "0\n");
  write_file(node1 + "/RANKS", "1\n");
  write_file(again + "/RANKS", "1\n");
  const std::string tensors3 = random_bytes(1 << 20, 3), record3 = "{\"step\": 3}";
  write_step(node1, "step-000003", tensors3, record3);
  FileStore store(dir.path() + "/store");
  auto options = [&](int node, const std::string& folder) {
    BuddyReplicaOptions o;
    o.node = node;
    o.nnodes = 2;
    o.memory_folder = folder;
    o.host = "127.0.0.1";
    o.timeout = std::chrono::seconds(20);
    return o;
  };
  signal(SIGPIPE, SIG_IGN);
  const pid_t child = fork();  // node 1, before this process starts any thread
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::ostringstream quiet;
    FileStore its_store(dir.path() + "/store");
    BuddyReplicas lost(options(1, node1), its_store, quiet);
    lost.start();
    for (;;) pause();
  }
  std::ostringstream log0;
  BuddyReplicas buddy(options(0, node0), store, log0);
  buddy.start();
  const bool held3 = store_reaches(store, BuddyReplicas::held_key(1), "3", 30);
  // Step 6, large: its push is in flight when node 1 is killed.
  bool receiving6 = false;
  if (held3) {
    write_step(node1, "step-000006", random_bytes(512u << 20, 6), "{\"step\": 6}");
    receiving6 = store_reaches(store, BuddyReplicas::receiving_key(1), "6", 30);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(held3) << "node 0 never held node 1's step 3:\n" << log0.str();
  ASSERT_TRUE(receiving6) << log0.str();
  // The push of step 6 never finished: step 3 stays the replica.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(store.get(BuddyReplicas::held_key(1), std::chrono::seconds(1)), "3")
      << "step 6 was whole before the kill (make it larger):\n" << log0.str();

  // Node 1's replacement is handed back step 3, byte for byte.
  std::ostringstream log1;
  BuddyReplicas replacement(options(1, again), store, log1);
  EXPECT_EQ(replacement.fetch_own_replica(), 3) << log1.str() << "\n--- node 0:\n" << log0.str();
  EXPECT_TRUE(read_file(again + "/step-000003/rank-1.safetensors") == tensors3) << "the tensors file differs";
  EXPECT_EQ(read_file(again + "/step-000003/rank-1.json"), record3);
  EXPECT_EQ(read_file(again + "/" + BuddyReplicas::kFromBuddyFile), "step-000003");
  EXPECT_FALSE(std::filesystem::exists(again + "/step-000006")) << "a step that was never whole came back";
}
#else
TEST(BuddyReplicas, NeedsLibfabric) { GTEST_SKIP() << "no libfabric at configure time (libfabric-dev)"; }
#endif

}  // namespace
}  // namespace vitddp
