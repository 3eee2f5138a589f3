// AlgorithmCache: what one run writes, the next reads back word for word; files it cannot use
// (another GPU or library version, malformed, unreadable words) are set aside with a reason,
// never thrown on, and leave the cache empty.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/multiprocess.h"
#include "framework/core/error.h"
#include "framework/io/algorithm_cache.h"
#include "framework/io/file_lock.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

const AlgorithmCache::Record kRecord = {0, 1, 0xffffffffffffffffull, 0x0123456789abcdefull, 42, 7, 0x8000000000000000ull, 3};

TEST(AlgorithmCache, WhatOneRunSavesTheNextFindsWordForWord) {
  testing::TempFolder dir("vitddp_algo_cache");
  const std::string file = (dir / "algos.json").string();
  AlgorithmCache a("H200 sm_90, cuBLASLt 130200");
  a.put("bf16 op=NT m=1024 n=1600 k=4096", kRecord);
  a.put("f32 tf32 op=NN m=3072 n=1600 k=1024", AlgorithmCache::Record{9, 8, 7, 6, 5, 4, 3, 2});
  a.save(file);
  EXPECT_FALSE(fs::exists(file + ".tmp." + std::to_string(::getpid())));
  AlgorithmCache b("H200 sm_90, cuBLASLt 130200");
  EXPECT_EQ(b.load(file), "");
  EXPECT_EQ(b.size(), 2u);
  AlgorithmCache::Record r{};
  ASSERT_TRUE(b.find("bf16 op=NT m=1024 n=1600 k=4096", &r));
  EXPECT_EQ(r, kRecord);
  EXPECT_FALSE(b.find("bf16 op=NT m=1024 n=1600 k=4095", &r));
}

TEST(AlgorithmCache, AMissingFileIsAnEmptyCache) {
  testing::TempFolder dir("vitddp_algo_cache");
  AlgorithmCache c("ctx");
  EXPECT_EQ(c.load((dir / "none.json").string()), "");
  EXPECT_EQ(c.size(), 0u);
}

TEST(AlgorithmCache, AFileForAnotherGpuOrLibraryIsSetAside) {
  testing::TempFolder dir("vitddp_algo_cache");
  const std::string file = (dir / "algos.json").string();
  AlgorithmCache a("H200 sm_90, cuBLASLt 130200");
  a.put("k", kRecord);
  a.save(file);
  AlgorithmCache b("H100 sm_90, cuBLASLt 130200");
  const std::string why = b.load(file);
  EXPECT_NE(why.find("another GPU or library version"), std::string::npos) << why;
  EXPECT_EQ(b.size(), 0u);
}

TEST(AlgorithmCache, MalformedFilesAreSetAsideWithAReason) {
  testing::TempFolder dir("vitddp_algo_cache");
  const fs::path file = dir / "algos.json";
  const std::string head = R"({"version": 1, "context": "ctx", "algorithms": )";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {R"({"version": 2, "context": "ctx", "algorithms": {}})", "another format version"},
      {R"({"version": 1, "context": "ctx"})", "no \"algorithms\" object"},
      {head + R"({"k": ["0000000000000000"]}})", "is not 8 words"},
      {head + R"({"k": ["000000000000000g","0","0","0","0","0","0","0"]}})", "not 16 hex digits"},
      {head + R"({"k": [1,2,3,4,5,6,7,8]}})", "not 16 hex digits"},
  };
  for (const auto& [text, expected] : cases) {
    write_text(file, text);
    AlgorithmCache c("ctx");
    c.put("stale", kRecord);
    const std::string why = c.load(file.string());
    EXPECT_NE(why.find(expected), std::string::npos) << text << " -> " << why;
    EXPECT_EQ(c.size(), 0u) << text;
  }
}

TEST(AlgorithmCache, SavingIntoAFolderThatDoesNotExistThrowsNamingTheFile) {
  testing::TempFolder dir("vitddp_algo_cache");
  AlgorithmCache c("ctx");
  c.put("k", kRecord);
  const std::string file = (dir / "missing" / "algos.json").string();
  try {
    c.save(file);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write " + file), std::string::npos) << e.what();
  }
}

// A second process waits for the first's lock on the same file (ranks sharing one cache file).
TEST(FileLock, ASecondProcessWaitsForTheFirst) {
  testing::TempFolder dir("vitddp_algo_cache");
  const std::string lock_path = (dir / "cache.json.lock").string();
  const std::string ready = (dir / "child-has-lock").string();
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FileLock lock(lock_path);
    std::ofstream(ready) << "1";
    ::usleep(400 * 1000);
    ::_exit(lock.held() ? 0 : 1);
  }
  while (!fs::exists(ready)) ::usleep(1000);
  const auto start = std::chrono::steady_clock::now();
  {
    FileLock lock(lock_path);
    EXPECT_TRUE(lock.held());
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_GT(waited, 0.2);  // the child held it for 0.4 s after saying so
}

TEST(FileLock, AnUnopenableLockFileIsNotHeld) {
  FileLock lock("/nonexistent-folder-vitddp/x.lock");
  EXPECT_FALSE(lock.held());
}

}  // namespace
}  // namespace vitddp
