// ShmSegment: what one rank writes another mapping of the same name sees; names are exclusive;
// a missing name or a size mismatch is one clear error; unlink removes the name only.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <string>

#include "distributed/host_copy/shm_segment.h"

namespace vitddp::host_copy {
namespace {

std::string unique_name(const char* what) {
  return "/vitddp-test-" + std::string(what) + "-" + std::to_string(::getpid());
}

TEST(ShmSegment, TwoMappingsShareTheBytes) {
  const std::string name = unique_name("share");
  ShmSegment made = ShmSegment::create(name, 1 << 20);
  ASSERT_NE(made.data(), nullptr);
  EXPECT_EQ(static_cast<unsigned char*>(made.data())[12345], 0);  // zero-filled
  ShmSegment seen = ShmSegment::open(name, 1 << 20);
  std::memcpy(made.data(), "vitddp", 7);
  EXPECT_STREQ(static_cast<const char*>(seen.data()), "vitddp");
  EXPECT_NE(seen.data(), made.data());
  made.unlink();
  EXPECT_THROW(ShmSegment::open(name, 1 << 20), std::exception);  // the name is gone
  std::memcpy(seen.data(), "still", 6);                            // the mappings stay
  EXPECT_STREQ(static_cast<const char*>(made.data()), "still");
}

TEST(ShmSegment, BadNamesAndSizesAreClearErrors) {
  const std::string name = unique_name("errors");
  ShmSegment made = ShmSegment::create(name, 4096);
  try {
    ShmSegment::create(name, 4096);
    FAIL() << "a second create of one name must fail";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create shared memory"), std::string::npos) << e.what();
  }
  try {
    ShmSegment::open(name, 8192);
    FAIL() << "a size mismatch must fail";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("holds 4096 bytes, expected 8192"), std::string::npos) << e.what();
  }
  try {
    ShmSegment::open(unique_name("missing"), 4096);
    FAIL() << "a missing segment must fail";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("does every rank run on this host?"), std::string::npos) << e.what();
  }
  // The destructor removes a created name.
  { ShmSegment scoped = ShmSegment::create(unique_name("scoped"), 4096); }
  EXPECT_THROW(ShmSegment::open(unique_name("scoped"), 4096), std::exception);
}

}  // namespace
}  // namespace vitddp::host_copy
