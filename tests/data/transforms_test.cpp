// Decoding and the presets' transforms (data/image/): against PIL and torchvision on
// photographs (tests/python/transform_parity.py makes them from scikit-learn's samples and
// checks), torchvision's crop draw's bounds, and bad files as BadSample naming what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>

#include <nlohmann/json.hpp>

#include "common/multiprocess.h"
#include "common/parity_python.h"
#include "common/test_utils.h"
#include "data/image/decode.h"
#include "data/image/transforms.h"
#include "framework/io/safetensors.h"

namespace vitddp {
namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), {});
}

TEST(TransformParity, EvalAndTrainPresetsMatchTorchvisionOnPhotographs) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  testing::TempFolder dir("vitddp_transforms");
  const std::string made = testing::run_parity_script("transform_parity.py", "make " + dir.path());
  ASSERT_EQ(made.rfind("OK\n", 0), 0u) << made;
  std::ifstream list(dir / "images.json");
  const std::vector<std::string> files = nlohmann::json::parse(list).get<std::vector<std::string>>();
  ASSERT_GE(files.size(), 12u);
  constexpr int kSize = 224;
  const ImageTransform eval(false, kSize), train(true, kSize);
  NamedTensors dump;
  std::map<std::string, std::string> meta{{"size", std::to_string(kSize)},
                                          {"resize", std::to_string(eval_resize_for(kSize))}};
  std::string names;
  for (size_t k = 0; k < files.size(); ++k) {
    const std::vector<uint8_t> bytes = read_bytes((dir / files[k]).string());
    ASSERT_FALSE(bytes.empty()) << files[k];
    Tensor e = Tensor::empty({3, kSize, kSize}), t = Tensor::empty({3, kSize, kSize});
    eval.apply(bytes.data(), bytes.size(), 0, e.data<float>());
    const ImageSize full = read_image_size(bytes.data(), bytes.size());
    Generator gen(100 + k);
    CropDraw crop = draw_random_resized_crop(full.width, full.height, gen);
    crop.flip = k % 2 == 1;  // both ways over the images
    train.apply_crop(bytes.data(), bytes.size(), crop, t.data<float>());
    const std::string key = std::to_string(k);
    dump.emplace_back("eval." + key, e);
    dump.emplace_back("train." + key, t);
    meta["crop." + key] = std::to_string(crop.top) + "," + std::to_string(crop.left) + "," +
                          std::to_string(crop.height) + "," + std::to_string(crop.width) + "," +
                          (crop.flip ? "1" : "0");
    names += (names.empty() ? "" : ",") + files[k];
  }
  meta["files"] = names;
  // Cut in half, each format fails as a BadSample that names it.
  for (const char* name : {"china.jpg", "flower.png"}) {
    std::vector<uint8_t> bytes = read_bytes((dir / name).string());
    bytes.resize(bytes.size() / 2);
    Tensor e = Tensor::empty({3, kSize, kSize});
    EXPECT_TRUE(testing::throws_with([&] { eval.apply(bytes.data(), bytes.size(), 0, e.data<float>()); },
                                     {std::string(name).find(".jpg") != std::string::npos ? "corrupt JPEG" : "corrupt PNG"}))
        << name;
  }
  const std::string path = (dir / "dump.safetensors").string();
  write_safetensors(path, dump, meta);
  const std::string out = testing::run_parity_script("transform_parity.py", "check " + dir.path() + " " + path);
  std::cout << out;
  EXPECT_EQ(out.rfind("OK\n", 0), 0u) << out;
}

TEST(Transforms, RandomResizedCropStaysInsideTheImageAndItsRanges) {
  Generator gen(7);
  int flips = 0;
  for (int i = 0; i < 2000; ++i) {
    const int w = 50 + static_cast<int>(gen.next_u64() % 600), h = 50 + static_cast<int>(gen.next_u64() % 600);
    const CropDraw c = draw_random_resized_crop(w, h, gen);
    ASSERT_GT(c.width, 0);
    ASSERT_GT(c.height, 0);
    ASSERT_GE(c.left, 0);
    ASSERT_GE(c.top, 0);
    ASSERT_LE(c.left + c.width, w);
    ASSERT_LE(c.top + c.height, h);
    const double area = static_cast<double>(c.width) * c.height / (static_cast<double>(w) * h);
    EXPECT_LE(area, 1.0 + 1e-9);
    EXPECT_GE(area, 0.05) << w << "x" << h << ": " << c.width << "x" << c.height;  // 0.08 up to rounding
    flips += c.flip;
  }
  EXPECT_NEAR(flips, 1000, 120);
}

// What cannot be decoded is a BadSample that says what is wrong.
TEST(Decode, BadFilesAreBadSamplesThatSayWhy) {
  auto fails_with = [](const std::vector<uint8_t>& bytes, const std::string& words) {
    try {
      decode_image(bytes.data(), bytes.size());
    } catch (const BadSample& e) {
      return std::string(e.what()).find(words) != std::string::npos ? std::string() : std::string(e.what());
    }
    return std::string("no BadSample");
  };
  EXPECT_EQ(fails_with({}, "not a JPEG or PNG image"), "");
  EXPECT_EQ(fails_with({'h', 'e', 'l', 'l', 'o'}, "not a JPEG or PNG image"), "");
  EXPECT_EQ(fails_with({0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, 'J', 'F', 'I', 'F', 0}, "corrupt JPEG"), "");
  EXPECT_EQ(fails_with({0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'}, "corrupt PNG"),
            "");
}

}  // namespace
}  // namespace vitddp
