#include "distributed/file_store.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "common/multiprocess.h"
#include "common/test_utils.h"

namespace vitddp {
namespace {

using namespace std::chrono_literals;
using testing::run_in_processes;
using testing::TempFolder;

TEST(FileStore, SetThenGetReturnsTheValueForAnyKeyAndBytes) {
  TempFolder folder;
  FileStore store(folder.path() + "/nested/store");  // created on demand
  const std::string binary("a\0b\nc", 5);
  store.set("plain", "value");
  store.set("with/slash and space", binary);
  store.set("../escape", "x");
  store.set("", "empty key");
  EXPECT_EQ(store.get("plain", 1s), "value");
  EXPECT_EQ(store.get("with/slash and space", 1s), binary);
  EXPECT_EQ(store.get("../escape", 1s), "x");
  EXPECT_EQ(store.get("", 1s), "empty key");
  EXPECT_TRUE(store.has("plain"));
  EXPECT_FALSE(store.has("missing"));
  store.set("plain", "newer");
  EXPECT_EQ(store.get("plain", 1s), "newer");
  // Keys never escape the folder.
  EXPECT_FALSE(std::ifstream(folder.path() + "/nested/escape").good());
}

TEST(FileStore, GetTimesOutNamingTheKeyAndFolder) {
  TempFolder folder;
  FileStore store(folder.path());
  const auto start = std::chrono::steady_clock::now();
  try {
    store.get("never-written", 200ms);
    FAIL() << "get did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    std::string what = e.what();
    EXPECT_NE(what.find("never-written"), std::string::npos) << what;
    EXPECT_NE(what.find(folder.path()), std::string::npos) << what;
    EXPECT_NE(what.find("200 ms"), std::string::npos) << what;
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, 200ms);
  EXPECT_LT(elapsed, 2s);
}

TEST(FileStore, UnusableFolderIsAClearError) {
  TempFolder folder;
  const std::string file = folder.path() + "/a_file";
  std::ofstream(file) << "x";
  EXPECT_TRUE(testing::throws_with([&] { FileStore store(file + "/store"); },
                                   {"cannot create the rendezvous folder", file}));
  EXPECT_TRUE(testing::throws_with([&] { FileStore store(file); }, {"is not a folder", file}));
  EXPECT_TRUE(testing::throws_with([] { FileStore store(""); }, {"empty"}));
}

TEST(FileStore, ValuesCrossProcessesAndGetWaitsForTheWriter) {
  TempFolder folder;
  const std::string path = folder.path();
  auto codes = run_in_processes(
      2,
      [&](int rank) {
        FileStore store(path);
        if (rank == 0) {
          std::this_thread::sleep_for(200ms);  // the reader must wait, not fail
          store.set("from0", std::string(100000, 'z'));
          VITDDP_CHILD_CHECK(store.get("from1", 5s) == "reply", "wrong reply");
        } else {
          std::string value = store.get("from0", 5s);
          VITDDP_CHILD_CHECK(value == std::string(100000, 'z'), "got ", value.size(), " bytes");
          store.set("from1", "reply");
        }
        return 0;
      },
      20s);
  EXPECT_EQ(codes, std::vector<int>({0, 0})) << testing::describe_exit_codes(codes);
}


// Eight processes claim four places each, all at once: every place goes to exactly one of them,
// and its value is that process's.
TEST(FileStore, EachClaimGoesToOneProcess) {
  TempFolder folder;
  const std::string path = folder.path();
  constexpr int kProcs = 8, kPlaces = 4;
  auto codes = run_in_processes(
      kProcs,
      [&](int rank) {
        FileStore store(path);
        int won = 0;
        for (int place = 0; place < kPlaces; ++place)
          if (store.claim("place." + std::to_string(place), std::to_string(rank))) ++won;
        return 10 + won;  // the claims it won, for the parent to add up
      },
      20s);
  int claims = 0;
  for (int code : codes) {
    ASSERT_GE(code, 10) << testing::describe_exit_codes(codes);
    claims += code - 10;
  }
  EXPECT_EQ(claims, kPlaces) << testing::describe_exit_codes(codes);
  FileStore store(path);
  for (int place = 0; place < kPlaces; ++place) {
    const std::string owner = store.get("place." + std::to_string(place), 1s);
    EXPECT_GE(std::stoi(owner), 0);
    EXPECT_LT(std::stoi(owner), kProcs);
    EXPECT_FALSE(store.claim("place." + std::to_string(place), "late")) << "a claimed place was claimed again";
  }
}
TEST(MultiProcess, ReportsExitCodesThrowsAndKillsStragglers) {
  auto codes = run_in_processes(
      4,
      [](int rank) {
        if (rank == 1) throw Error("deliberate");
        if (rank == 2) std::this_thread::sleep_for(60s);
        return rank == 3 ? 7 : 0;
      },
      1s);
  EXPECT_EQ(codes, std::vector<int>({0, testing::kChildThrew, testing::kChildTimedOut, 7}))
      << testing::describe_exit_codes(codes);
}

}  // namespace
}  // namespace vitddp
