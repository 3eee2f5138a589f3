#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/test_utils.h"
#include "train/config.h"

namespace vitddp {
namespace {

TrainConfig parse(std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  TrainConfig c;
  EXPECT_TRUE(parse_train_config(static_cast<int>(argv.size()), argv.data(), &c));
  return c;
}

TEST(TrainConfig, EveryShippedConfigParses) {
  int count = 0;
  for (auto& entry : std::filesystem::directory_iterator(std::string(VITDDP_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".json") continue;
    TrainConfig c = parse({"--config", entry.path().string()});
    EXPECT_EQ(c.config_file, entry.path().string());
    ++count;
  }
  EXPECT_GE(count, 3);
}

TEST(TrainConfig, FlagsOverrideTheFileWhichOverridesDefaults) {
  auto path = std::filesystem::temp_directory_path() / "vitddp_config_test.json";
  std::ofstream(path) << R"({"steps": 7, "lr": 0.5, "model": "vit_b_16", "json": true})";
  TrainConfig c = parse({"--config", path.string(), "--steps", "9"});
  EXPECT_EQ(c.steps, 9);
  EXPECT_EQ(c.lr, 0.5);
  EXPECT_EQ(c.model, "vit_b_16");
  EXPECT_TRUE(c.json);
  EXPECT_EQ(c.batch_size, TrainConfig().batch_size);
  // The JSON form of a config round-trips through a file.
  std::ofstream(path) << c.to_json().dump();
  TrainConfig again = parse({"--config", path.string()});
  EXPECT_EQ(again.to_json(), c.to_json());
}

// What the user gave is recorded wherever it came from (the program never changes those keys),
// and --set, after the file, overrides it like a flag.
TEST(TrainConfig, GivenKeysAreRecordedWhereverTheyCameFrom) {
  auto path = std::filesystem::temp_directory_path() / "vitddp_config_given.json";
  std::ofstream(path) << R"({"transport": "nccl", "workers": 2})";
  TrainConfig c = parse({"--config", path.string(), "--bucket-mb", "50", "--set", "tail-bucket-mb=5", "--set",
                         "workers=3", "--set", "ddp=true"});
  EXPECT_EQ(c.given, (std::set<std::string>{"bucket-mb", "ddp", "tail-bucket-mb", "transport", "workers"}));
  EXPECT_EQ(c.workers, 3);
  EXPECT_EQ(c.tail_bucket_mb, 5.0);
  EXPECT_TRUE(c.ddp);
  EXPECT_FALSE(c.is_given("hook"));
  EXPECT_TRUE(is_public_flag("bucket-mb"));
  EXPECT_FALSE(is_public_flag("tail-bucket-mb"));
  EXPECT_FALSE(is_public_flag("no-such-key"));
}

TEST(TrainConfig, ValidationNamesTheSetting) {
  TrainConfig c;
  c.untimed_steps = -1;
  EXPECT_TRUE(testing::throws_with([&] { c.validate(); }, {"untimed-steps must be in [0, 100000000]"}));
  c = TrainConfig();
  c.profile_steps = "12:10";
  EXPECT_TRUE(testing::throws_with([&] { c.validate(); }, {"profile-steps must be A:B"}));
  c.profile_steps = "10:13";
  EXPECT_EQ(c.profile_range(), (std::pair<int64_t, int64_t>{10, 13}));
  c = TrainConfig();
  c.precision = "fp8";
  EXPECT_TRUE(testing::throws_with([&] { c.validate(); }, {"unknown precision 'fp8'"}));
  c = TrainConfig();
  c.dataset_size = kMaxDatasetSize + 1;
  EXPECT_TRUE(testing::throws_with([&] { c.validate(); }, {"dataset-size must be in [1, 1000000000]"}));
  c = TrainConfig();
  c.update = "sharded";
  c.transport = "host-copy";  // the CLI refuses it without a GPU first (tests/train/shard_update_test.cpp)
  EXPECT_TRUE(testing::throws_with([&] { c.validate(); }, {"update sharded reduce-scatters and all-gathers through "
                                                           "NCCL; transport host-copy carries all-reduces only"}));
}

// A hostile config file is one line too: nesting far deeper than a flat config needs is refused
// while parsing (no recursion over it), and a key or value is printed without its control bytes.
TEST(TrainConfig, HostileConfigFilesAreOneLine) {
  TrainConfig c;
  const std::string deep = "{\"steps\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_TRUE(testing::throws_with([&] { parse_json_config(deep, "deep.json", &c); },
                                   {"deep.json: JSON nested deeper than 8 levels"}));
  // The file's error is one line holding `expected`.
  auto one_line_error = [&](const std::string& text, const std::string& path, const std::string& expected) {
    try {
      parse_json_config(text, path, &c);
      ADD_FAILURE() << "no error for " << path;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  one_line_error("{\"a\\nb\": 1}", "key.json", "key.json: unknown key \"a?b\"");
  one_line_error("{\"steps\": [[[\"x\\ny\"]]]}", "value.json", "value.json: \"steps\" must be");
}

}  // namespace
}  // namespace vitddp
