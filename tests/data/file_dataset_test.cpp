#include "data/file_dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/test_utils.h"
#include "data/synthetic_dataset.h"
#include "framework/io/safetensors.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;

class FileDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "vitddp_fd_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  std::string write(const std::string& name, const NamedTensors& t, const std::map<std::string, std::string>& m = {}) {
    write_safetensors(file(name), t, m);
    return file(name);
  }
  std::string dir_;
};

TEST_F(FileDatasetTest, RoundTripThroughSaveDataset) {
  SyntheticDataset src(37, 3, 5, 4, 12, 8, SyntheticKind::kLearnable);
  save_dataset(src, file("d.safetensors"));
  FileDataset d(file("d.safetensors"));
  EXPECT_EQ(d.size(), 37);
  EXPECT_EQ(d.image_shape(), (Shape{3, 5, 4}));
  EXPECT_EQ(d.num_classes(), 12);  // from the metadata, even if the top class never occurs
  std::vector<float> a(60), b(60);
  int64_t la, lb;
  for (int64_t i = 0; i < 37; ++i) {
    src.get(i, a.data(), &la);
    d.get(i, b.data(), &lb);
    EXPECT_EQ(a, b);
    EXPECT_EQ(la, lb);
  }
  EXPECT_TRUE(testing::throws_with([&] { d.get(37, b.data(), &lb); }, {"d.safetensors", "index 37 out of range"}));
}

TEST_F(FileDatasetTest, InfersOrTakesNumClasses) {
  Tensor images = Tensor::zeros({4, 1, 2, 2});
  Tensor labels = Tensor::from_vector_i64({0, 3, 1, 3}, {4});
  const std::string p = write("d.safetensors", {{"images", images}, {"labels", labels}});
  EXPECT_EQ(FileDataset(p).num_classes(), 4);
  EXPECT_EQ(FileDataset(p, 10).num_classes(), 10);
  EXPECT_TRUE(testing::throws_with([&] { FileDataset(p, 3); }, {p, "label 3 of sample 1 is out of range for 3 classes"}));
}

TEST_F(FileDatasetTest, ClearErrorsNamingTheFile) {
  Tensor images = Tensor::zeros({4, 1, 2, 2});
  Tensor labels = Tensor::from_vector_i64({0, 1, 1, 0}, {4});
  std::string p = write("no_labels.safetensors", {{"images", images}});
  EXPECT_TRUE(testing::throws_with([&] { FileDataset{p}; }, {p, "no tensor 'labels'"}));
  p = write("no_images.safetensors", {{"labels", labels}});
  EXPECT_TRUE(testing::throws_with([&] { FileDataset{p}; }, {p, "no tensor 'images'"}));
  p = write("f64.safetensors", {{"images", images.to(DType::kF64)}, {"labels", labels}});
  EXPECT_TRUE(testing::throws_with([&] { FileDataset{p}; }, {p, "'images' is F64[4, 1, 2, 2], expected F32[N, C, H, W]"}));
  p = write("rank3.safetensors", {{"images", Tensor::zeros({4, 2, 2})}, {"labels", labels}});
  EXPECT_TRUE(testing::throws_with([&] { FileDataset{p}; }, {p, "'images' is F32[4, 2, 2]"}));
  p = write("f32labels.safetensors", {{"images", images}, {"labels", labels.to(DType::kF32)}});
  EXPECT_TRUE(testing::throws_with([&] { FileDataset{p}; }, {p, "'labels' is F32[4], expected I64[N]"}));
  p = write("count.safetensors", {{"images", images}, {"labels", Tensor::from_vector_i64({0, 1, 1}, {3})}});
  EXPECT_TRUE(testing::throws_with([&] { FileDataset{p}; }, {p, "'images' has 4 samples but 'labels' has 3"}));
  p = write("neg.safetensors", {{"images", images}, {"labels", Tensor::from_vector_i64({0, -1, 1, 0}, {4})}});
  EXPECT_TRUE(testing::throws_with([&] { FileDataset{p}; }, {p, "label -1 of sample 1 is negative"}));
  p = write("extra.safetensors", {{"images", images}, {"labels", labels}, {"masks", labels}});
  EXPECT_TRUE(testing::throws_with([&] { FileDataset{p}; }, {p, "unexpected tensor 'masks'"}));
  p = write("empty.safetensors", {{"images", Tensor::zeros({0, 1, 2, 2})}, {"labels", Tensor::zeros({0}, DType::kI64)}});
  EXPECT_TRUE(testing::throws_with([&] { FileDataset{p}; }, {p, "empty"}));
  p = write("meta.safetensors", {{"images", images}, {"labels", labels}}, {{"num_classes", "two"}});
  EXPECT_TRUE(testing::throws_with([&] { FileDataset{p}; }, {p, "metadata num_classes 'two'"}));
  p = file("missing.safetensors");
  EXPECT_TRUE(testing::throws_with([&] { FileDataset{p}; }, {"cannot read " + p}));
}

}  // namespace
}  // namespace vitddp
