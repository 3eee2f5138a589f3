// Image files through `train` (CPU): a corrupt file is skipped by name and counted in --json,
// and a folder with more classes than the model has is one line and exit 2.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/image_files.h"
#include "common/multiprocess.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;

void make_folder(const fs::path& root, int classes, int per_class) {
  for (int c = 0; c < classes; ++c) {
    fs::create_directories(root / ("class" + std::to_string(c)));
    for (int i = 0; i < per_class; ++i)
      testing::write_file((root / ("class" + std::to_string(c)) / (std::to_string(i) + ".jpg")).string(),
                          testing::jpeg_bytes(40, 30, static_cast<uint64_t>(c * 100 + i)));
  }
}

TEST(ImageDataCli, ACorruptFileIsSkippedByNameAndCounted) {
  testing::TempFolder dir("vitddp_images");
  make_folder(dir.path(), 4, 25);
  testing::write_file((dir / "class2/broken.jpg").string(), testing::text_bytes("not a JPEG"));
  const testing::TrainOutcome o = testing::run_train(
      "", "--model vit_tiny --batch-size 16 --steps 8 --print-every 0 --json --data " + dir.path());
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("warning: skipped bad sample " + (dir / "class2/broken.jpg").string() + ": "),
            std::string::npos) << o.out;
  EXPECT_EQ(o.json()["bad_samples"], 1) << o.out;
}

TEST(ImageDataCli, MoreClassesThanTheModelHasIsOneLine) {
  testing::TempFolder dir("vitddp_images");
  make_folder(dir.path(), 12, 1);
  const testing::TrainOutcome o =
      testing::run_train("", "--model vit_tiny --batch-size 4 --steps 2 --print-every 0 --data " + dir.path());
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("labels go up to"), std::string::npos) << o.out;
}

}  // namespace
}  // namespace vitddp
