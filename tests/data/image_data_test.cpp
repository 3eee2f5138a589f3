// Image data from files: the ImageFolder listing (against torchvision's), tar shards and what
// is wrong with them (one line each), bad samples skipped by name and counted up to the limit
// (Note [Bad samples]), and the shard streams' order (Note [Shard streams]).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "common/image_files.h"
#include "common/multiprocess.h"
#include "common/parity_python.h"
#include "common/test_utils.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/tar_shards.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;
using testing::jpeg_bytes;
using testing::tar_bytes;
using testing::text_bytes;
using testing::throws_with;
using testing::write_file;

std::shared_ptr<const ImageTransform> eval_preset(int size = 16) {
  return std::make_shared<ImageTransform>(false, size);
}

void make_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  write_file(path.string(), bytes);
}

// Class names and files whose sort orders trip a naive listing: upper case before lower,
// "a2" after "a", a nested folder, extensions in any case, a file torchvision ignores.
void make_tricky_folder(const fs::path& root) {
  int seed = 0;
  for (const char* f : {"b/z.jpg", "b/a.JPEG", "a/x.jpeg", "a/sub/y.jpg", "a/sub/a.PNG", "a/w.txt", "A10/c.jpg",
                        "a2/k.jpg", "a2/k.jpg.bak", "a2/j j.jpg"})
    make_file(root / f, jpeg_bytes(20, 14, static_cast<uint64_t>(++seed)));
}

TEST(ImageFolder, ListsAsTorchvisionsImageFolder) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  testing::TempFolder dir("vitddp_folder");
  make_tricky_folder(dir.path());
  const ImageFolderDataset data(dir.path(), eval_preset());
  std::ostringstream ours;
  ours << "OK\nclasses ";
  for (size_t c = 0; c < data.classes().size(); ++c) ours << (c ? "/" : "") << data.classes()[c];
  ours << "\n";
  for (int64_t i = 0; i < data.size(); ++i) ours << data.label_of(i) << " " << data.sample_name(i) << "\n";
  EXPECT_EQ(data.size(), 8);  // w.txt and k.jpg.bak are not images
  EXPECT_EQ(testing::run_parity_script("image_folder_listing.py", dir.path()), ours.str());
}

TEST(ImageFolder, AnEvalSetIsLabelledByTheTrainingClasses) {
  testing::TempFolder dir("vitddp_folder");
  make_file(dir / "val/dog/1.jpg", jpeg_bytes(16, 16, 1));
  const ImageFolderDataset val((dir / "val").string(), eval_preset(), {"cat", "dog"});
  EXPECT_EQ(val.num_classes(), 2);
  EXPECT_EQ(val.label_of(0), 1);
  EXPECT_TRUE(throws_with([&] { ImageFolderDataset((dir / "val").string(), eval_preset(), {"cat"}); },
                          {"class folder 'dog' is not a class of the training data"}));
}

TEST(ImageFolder, WhatIsWrongWithAFolderIsOneLine) {
  testing::TempFolder dir("vitddp_folder");
  EXPECT_TRUE(throws_with([&] { ImageFolderDataset((dir / "nope").string(), eval_preset()); }, {"no such folder"}));
  EXPECT_TRUE(throws_with([&] { ImageFolderDataset(dir.path(), eval_preset()); }, {"no class folders"}));
  make_file(dir / "cat/notes.txt", text_bytes("not an image"));
  EXPECT_TRUE(throws_with([&] { ImageFolderDataset(dir.path(), eval_preset()); },
                          {"class folder 'cat' holds no image file"}));
}

// The loader with a corrupt JPEG, a truncated one and a text file named .jpg: each is told once
// by name and replaced by the next sample; past the limit the run stops, naming the last one.
TEST(ImageFolder, BadSamplesAreSkippedByNameAndCountedUpToTheLimit) {
  testing::TempFolder dir("vitddp_folder");
  for (int i = 0; i < 12; ++i) make_file(dir / ("c" + std::to_string(i % 2)) / ("good" + std::to_string(i) + ".jpg"),
                                         jpeg_bytes(24, 18, static_cast<uint64_t>(i)));
  std::vector<uint8_t> truncated = jpeg_bytes(24, 18, 99);
  truncated.resize(truncated.size() / 3);
  std::vector<uint8_t> corrupt = jpeg_bytes(24, 18, 98);
  for (size_t k = 2; k < 40; ++k) corrupt[k] = 0x5a;
  make_file(dir / "c0/bad-truncated.jpg", truncated);
  make_file(dir / "c0/bad-corrupt.jpg", corrupt);
  make_file(dir / "c1/bad-text.jpg", text_bytes("hello"));
  const ImageFolderDataset data(dir.path(), std::make_shared<ImageTransform>(true, 16));
  ASSERT_EQ(data.size(), 15);
  auto run = [&](int64_t limit, std::vector<std::string>* told) {
    LoaderOptions o;
    o.batch_size = 5;
    o.num_workers = 2;
    o.max_bad_samples = limit;
    o.on_bad_sample = [told](const std::string& what) { told->push_back(what); };
    DataLoader loader(data, DistributedSampler({15, 0, 1, true, 3, false}), o);
    for (int i = 0; i < 6; ++i) {  // two epochs
      const Batch b = loader.next();
      EXPECT_EQ(b.images.shape()[0], 5);
    }
    return loader.stats().bad_samples;
  };
  std::vector<std::string> told;
  EXPECT_EQ(run(3, &told), 3);
  ASSERT_EQ(told.size(), 3u);
  std::set<std::string> names;
  for (const std::string& t : told) names.insert(fs::path(t.substr(0, t.find(':'))).filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"bad-truncated.jpg", "bad-corrupt.jpg", "bad-text.jpg"}));
  std::vector<std::string> told2;
  EXPECT_TRUE(throws_with([&] { run(2, &told2); }, {"3 bad samples, more than the 2 allowed", "bad-"}));
}

// A shard of `n` samples with keys from `first`; labels k % 3.
std::vector<uint8_t> shard(int first, int n) {
  std::vector<testing::TarMember> m;
  for (int k = first; k < first + n; ++k) {
    const std::string key = "s" + std::to_string(k);
    m.push_back({key + ".jpg", jpeg_bytes(20, 20, static_cast<uint64_t>(k))});
    m.push_back({key + ".cls", text_bytes(std::to_string(k % 3))});
  }
  return tar_bytes(m);
}

TEST(TarShards, IndexesEveryShardInOrder) {
  testing::TempFolder dir("vitddp_shards");
  write_file((dir / "d-000.tar").string(), shard(0, 4));
  write_file((dir / "d-001.tar").string(), shard(4, 3));
  const std::vector<std::string> paths = expand_shard_spec((dir / "d-{000..001}.tar").string());
  EXPECT_EQ(paths, expand_shard_spec(dir.path()));
  const TarShardDataset data(paths, eval_preset());
  EXPECT_EQ(data.size(), 7);
  EXPECT_EQ(data.shards(), 2);
  EXPECT_EQ(data.shard_first(1), 4);
  EXPECT_EQ(data.num_classes(), 3);
  for (int64_t i = 0; i < 7; ++i) {
    EXPECT_EQ(data.label_of(i), i % 3);
    EXPECT_EQ(data.sample_name(i), paths[i < 4 ? 0 : 1] + ":s" + std::to_string(i));
  }
  std::vector<float> image(3 * 16 * 16);
  int64_t label = -1;
  data.get(5, image.data(), &label);
  EXPECT_EQ(label, 2);
}

TEST(TarShards, WhatIsWrongWithAShardIsOneLine) {
  testing::TempFolder dir("vitddp_shards");
  const std::string path = (dir / "x.tar").string();
  auto open = [&](const std::vector<uint8_t>& bytes) {
    write_file(path, bytes);
    return [&] { TarShardDataset({path}, eval_preset()); };
  };
  std::vector<uint8_t> cut = shard(0, 2);
  cut.resize(700);
  EXPECT_TRUE(throws_with(open(cut), {"x.tar", "truncated"}));
  std::vector<uint8_t> damaged = shard(0, 2);
  damaged[3] ^= 0x40;
  EXPECT_TRUE(throws_with(open(damaged), {"x.tar", "bad header checksum"}));
  EXPECT_TRUE(throws_with(open(tar_bytes({{"a.jpg", jpeg_bytes(8, 8, 1)}})), {"sample 'a' has no .cls member"}));
  EXPECT_TRUE(throws_with(open(tar_bytes({{"a.cls", text_bytes("1")}})), {"sample 'a' has no .jpg, .jpeg or .png"}));
  EXPECT_TRUE(throws_with(open(tar_bytes({{"a.jpg", jpeg_bytes(8, 8, 1)}, {"a.cls", text_bytes("cat")}})),
                          {"sample 'a'", "not a label"}));
  EXPECT_TRUE(throws_with(open(tar_bytes({})), {"a shard without samples"}));
  EXPECT_TRUE(throws_with([&] { expand_shard_spec((dir / "y-{000..003}.tar").string()); }, {"no such shard"}));
  EXPECT_TRUE(throws_with([&] { expand_shard_spec((dir / "empty").string() + "/"); }, {}));
}

// Note [Shard streams]: every rank the same number of samples per epoch, from whole shards that
// no two ranks share in an epoch, a function of (seed, epoch, rank), reshuffled by epoch.
TEST(TarShards, StreamsGiveEachRankWholeShardsAndTheSameCount) {
  const std::vector<int64_t> first{0, 10, 25, 31, 50}, count{10, 15, 6, 19, 7};  // 57 samples
  for (int world : {1, 2, 3}) {
    std::vector<std::set<int>> shards_of_rank(static_cast<size_t>(world));
    for (int64_t epoch : {0, 1}) {
      std::set<int> seen_shards;
      for (int rank = 0; rank < world; ++rank) {
        const ShardStreamOrder order(first, count, 7, rank, world);
        const std::vector<int64_t> a = order.indices_of(epoch);
        EXPECT_EQ(a, ShardStreamOrder(first, count, 7, rank, world).indices_of(epoch));
        EXPECT_EQ(static_cast<int64_t>(a.size()), 57 / world);
        std::set<int> mine;
        for (int64_t i : a) {
          ASSERT_TRUE(i >= 0 && i < 57);
          int s = 0;
          while (s + 1 < 5 && first[static_cast<size_t>(s + 1)] <= i) ++s;
          mine.insert(s);
        }
        for (int s : mine) EXPECT_TRUE(seen_shards.insert(s).second) << "shard " << s << " on two ranks";
        if (epoch == 1) EXPECT_NE(a, order.indices_of(0)) << "epoch 1 is reshuffled";
      }
    }
  }
  EXPECT_TRUE(throws_with([&] { ShardStreamOrder(first, count, 7, 0, 6); }, {"shard"}));
}

}  // namespace
}  // namespace vitddp
