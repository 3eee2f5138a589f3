#include "framework/io/safetensors.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/test_utils.h"
#include "framework/core/random.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;

const std::string kCorpus = std::string(VITDDP_SOURCE_DIR) + "/tests/data/corpus";

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "vitddp_st_XXXXXX").string();
    VITDDP_ASSERT(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// Bitwise comparison via doubles (exact for every supported dtype).
void expect_same(const Tensor& a, const Tensor& b, const std::string& name) {
  EXPECT_EQ(a.dtype(), b.dtype()) << name;
  EXPECT_EQ(a.shape(), b.shape()) << name;
  EXPECT_EQ(a.to_vector(), b.to_vector()) << name;
}

NamedTensors sample_tensors() {
  Generator gen(11);
  Tensor base = testing::random_tensor({3, 4}, gen, DType::kF32);
  NamedTensors t;
  t.emplace_back("f32", testing::random_tensor({2, 3, 4}, gen, DType::kF32));
  t.emplace_back("f64", testing::random_tensor({5}, gen, DType::kF64));
  t.emplace_back("bf16", testing::random_tensor({3, 3}, gen, DType::kBF16));
  t.emplace_back("f16", testing::random_tensor({7}, gen, DType::kF16));
  t.emplace_back("i64", Tensor::from_vector_i64({-5, 0, 1ll << 50, 3}, {2, 2}));
  t.emplace_back("transposed", base.as_strided({4, 3}, {1, 4}, 0));  // non-contiguous
  t.emplace_back("column", base.as_strided({3}, {4}, 1));             // strided with offset
  t.emplace_back("scalar", Tensor::full({}, 2.5, DType::kF64));
  t.emplace_back("empty", Tensor::empty({0, 4}, DType::kF32));
  t.emplace_back("encoder.layers.0.attn.in_proj_weight", testing::random_tensor({6, 2}, gen, DType::kF32));
  return t;
}

TEST(Safetensors, RoundTripAllDtypesNonContiguousAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  NamedTensors tensors = sample_tensors();
  ASSERT_FALSE(tensors[5].second.is_contiguous());
  std::map<std::string, std::string> meta{{"format", "pt"}, {"step", "12"}, {"unicode", "\xc3\xa9t\xc3\xa9"}};
  write_safetensors(path, tensors, meta);
  SafetensorsFile f = read_safetensors(path);
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(f.tensors[i].first, tensors[i].first);
    expect_same(f.tensors[i].second, tensors[i].second, tensors[i].first);
    EXPECT_TRUE(f.tensors[i].second.is_contiguous());
  }
  EXPECT_EQ(f.metadata, meta);
  ASSERT_NE(f.find("i64"), nullptr);
  EXPECT_EQ(f.find("i64")->to_vector()[2], static_cast<double>(1ll << 50));
  EXPECT_EQ(f.find("nope"), nullptr);

  // The in-memory serialisation is the file, byte for byte, and parses back the same.
  const std::string bytes = serialize_safetensors(tensors, meta);
  EXPECT_EQ(bytes, read_bytes(path));
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  SafetensorsFile g = parse_safetensors(bytes.data(), bytes.size(), "mem");
  ASSERT_EQ(g.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) expect_same(g.tensors[i].second, tensors[i].second, tensors[i].first);

  // No temporary file left behind; overwriting works.
  for (const auto& e : fs::directory_iterator(dir.path())) EXPECT_EQ(e.path().filename(), "model.safetensors");
  write_safetensors(path, {{"x", Tensor::full({2}, 1.0)}});
  EXPECT_EQ(read_safetensors(path).tensors.size(), 1u);
}

TEST(Safetensors, NoTensorsAndNoMetadata) {
  TempDir dir;
  write_safetensors(dir.file("e.safetensors"), {});
  SafetensorsFile f = read_safetensors(dir.file("e.safetensors"));
  EXPECT_TRUE(f.tensors.empty());
  EXPECT_TRUE(f.metadata.empty());
}

TEST(Safetensors, WriteRejectsBadNames) {
  TempDir dir;
  Tensor t = Tensor::zeros({2});
  EXPECT_TRUE(testing::throws_with([&] { write_safetensors(dir.file("a"), {{"w", t}, {"w", t}}); },
                                   {"duplicate tensor name 'w'"}));
  EXPECT_TRUE(testing::throws_with([&] { write_safetensors(dir.file("a"), {{"__metadata__", t}}); }, {"reserves"}));
  EXPECT_TRUE(testing::throws_with([&] { write_safetensors(dir.file("a"), {{"", t}}); }, {"empty tensor name"}));
  EXPECT_TRUE(testing::throws_with([&] { write_safetensors(dir.file("a"), {{"u", Tensor()}}); }, {"undefined"}));
  EXPECT_TRUE(testing::throws_with([&] { write_safetensors(dir.file("a"), {{"bad\xff", t}}); }, {"UTF-8"}));
  EXPECT_FALSE(fs::exists(dir.file("a")));
}

TEST(Safetensors, WriteErrorsNameThePathAndErrno) {
  TempDir dir;
  const std::string missing_dir = dir.file("no/such/dir/x.safetensors");
  EXPECT_TRUE(testing::throws_with([&] { write_safetensors(missing_dir, {{"a", Tensor::zeros({1})}}); },
                                   {"cannot write " + missing_dir + ": No such file or directory"}));
  if (::geteuid() != 0) {  // root ignores permissions
    fs::create_directory(dir.file("ro"));
    fs::permissions(dir.file("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    const std::string ro = dir.file("ro/x.safetensors");
    EXPECT_TRUE(testing::throws_with([&] { write_safetensors(ro, {{"a", Tensor::zeros({1})}}); },
                                     {"cannot write " + ro + ": Permission denied"}));
  }
  EXPECT_TRUE(testing::throws_with([&] { write_safetensors("/dev/null/x", {{"a", Tensor::zeros({1})}}); },
                                   {"cannot write /dev/null/x: Not a directory"}));
}

TEST(Safetensors, ReadErrorsNameThePath) {
  TempDir dir;
  const std::string missing = dir.file("missing.safetensors");
  EXPECT_TRUE(testing::throws_with([&] { read_safetensors(missing); },
                                   {"cannot read " + missing + ": No such file or directory"}));
  EXPECT_TRUE(testing::throws_with([&] { read_safetensors(dir.path()); }, {dir.path(), "not a regular file"}));
}

struct CorpusCase {
  std::string file;
  std::vector<std::string> expect;
};

std::vector<CorpusCase> bad_corpus() {
  const std::string dir = kCorpus + "/safetensors";
  nlohmann::json expected = nlohmann::json::parse(read_bytes(dir + "/expected.json"));
  std::vector<CorpusCase> cases;
  for (const auto& [file, parts] : expected.items()) cases.push_back({file, parts.get<std::vector<std::string>>()});
  return cases;
}

// A header naming many tensors parses in time linear in their count: nlohmann's callback parser
// rescanned the whole header at every tensor's end (quadratic in the count); the tensors keep
// their header order.
TEST(Safetensors, ManyTensorsParseInLinearTime) {
  constexpr int kTensors = 40000;
  std::string header = "{";
  for (int i = 0; i < kTensors; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "t%07d", kTensors - 1 - i);  // descending: not sorted order
    header += std::string(i ? "," : "") + "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
  }
  header += "}";
  std::string bytes(8, '\0');
  for (int k = 0; k < 8; ++k) bytes[k] = static_cast<char>((static_cast<uint64_t>(header.size()) >> (8 * k)) & 0xFF);
  bytes += header;
  const auto start = std::chrono::steady_clock::now();
  SafetensorsFile f = parse_safetensors(bytes.data(), bytes.size(), "many");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(f.tensors.size(), static_cast<size_t>(kTensors));
  EXPECT_EQ(f.tensors.front().first, "t0039999");
  EXPECT_EQ(f.tensors.back().first, "t0000000");
  EXPECT_LT(seconds, 5.0);
}

TEST(SafetensorsCorpus, EveryBadFileHasAnExpectation) {
  const std::string dir = kCorpus + "/safetensors";
  std::set<std::string> files, listed;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.insert(e.path().filename().string());
  for (const CorpusCase& c : bad_corpus()) listed.insert(c.file);
  EXPECT_EQ(files, listed) << "regenerate with python3 tests/data/corpus/make_corpus.py";
  EXPECT_GE(files.size(), 40u);
}

TEST(SafetensorsCorpus, BadFilesFailWithOneLineNamingFileAndProblem) {
  for (const CorpusCase& c : bad_corpus()) {
    const std::string path = kCorpus + "/safetensors/" + c.file;
    std::vector<std::string> parts = c.expect;
    parts.insert(parts.begin(), path + ": ");
    EXPECT_TRUE(testing::throws_with([&] { read_safetensors(path); }, parts)) << c.file;
    try {
      read_safetensors(path);
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << c.file << ": " << what;
      EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << what;
      EXPECT_LT(what.size(), 600u) << what;
      for (char ch : what) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << c.file << ": unprintable in " << what;
    }
    // The in-memory parser gives the same message with its label.
    const std::string bytes = read_bytes(path);
    parts[0] = "buffer: ";
    EXPECT_TRUE(testing::throws_with([&] { parse_safetensors(bytes.data(), bytes.size(), "buffer"); }, parts))
        << c.file;
  }
}

TEST(SafetensorsCorpus, GoodFilesParse) {
  const std::string dir = kCorpus + "/safetensors_ok";
  SafetensorsFile f = read_safetensors(dir + "/all_dtypes.safetensors");
  std::vector<std::string> names;
  for (const auto& [n, t] : f.tensors) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"f32", "f64", "bf16", "f16", "i", "scalar", "empty"}));
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "corpus"}}));
  expect_same(*f.find("f32"), Tensor::from_vector({1.5, -2.25, 3.0, 0.0625}, {2, 2}, DType::kF32), "f32");
  expect_same(*f.find("f64"), Tensor::from_vector({1, 2, -3.5}, {1, 3}, DType::kF64), "f64");
  expect_same(*f.find("bf16"), Tensor::from_vector({1, -2, 0.5}, {3}, DType::kBF16), "bf16");
  expect_same(*f.find("f16"), Tensor::from_vector({1, -2, 0.5}, {3}, DType::kF16), "f16");
  expect_same(*f.find("i"), Tensor::from_vector_i64({-1, 1ll << 40, 7}, {3}), "i");
  expect_same(*f.find("scalar"), Tensor::full({}, 42.0, DType::kF64), "scalar");
  EXPECT_EQ(f.find("empty")->shape(), (Shape{0, 3}));
  EXPECT_TRUE(read_safetensors(dir + "/no_tensors.safetensors").tensors.empty());
  EXPECT_EQ(read_safetensors(dir + "/metadata_only.safetensors").metadata.at("k"), "v");
  EXPECT_EQ(read_safetensors(dir + "/two_tensors.safetensors").tensors.size(), 2u);
}

// Every truncation and every single-bit flip of valid files: an Error or a successful parse,
// never a crash (run under ASan/valgrind to check memory safety too).
TEST(SafetensorsCorpus, TruncationsAndBitFlipsNeverCrash) {
  std::vector<std::string> seeds;
  for (const char* name : {"all_dtypes", "two_tensors"})
    seeds.push_back(read_bytes(kCorpus + "/safetensors_ok/" + name + ".safetensors"));
  seeds.push_back(serialize_safetensors(sample_tensors(), {{"k", "v"}}));
  int errors = 0, parsed = 0;
  auto attempt = [&](const std::string& bytes) {
    try {
      SafetensorsFile f = parse_safetensors(bytes.data(), bytes.size(), "fuzz");
      ++parsed;
    } catch (const Error& e) {
      ++errors;
      EXPECT_EQ(std::string(e.what()).rfind("fuzz: ", 0), 0u) << e.what();
    }
  };
  for (const std::string& seed : seeds) {
    for (size_t n = 0; n < seed.size(); ++n) attempt(seed.substr(0, n));
    for (size_t byte = 0; byte < seed.size(); ++byte)
      for (int bit = 0; bit < 8; ++bit) {
        std::string b = seed;
        b[byte] = static_cast<char>(b[byte] ^ (1 << bit));
        attempt(b);
      }
  }
  EXPECT_GT(errors, 1000);
  EXPECT_GT(parsed, 100);  // flips inside the data region are valid files
}

TEST(LoadNamedTensors, CopiesIntoTargetsByName) {
  Generator gen(3);
  Tensor w = testing::random_tensor({2, 3}, gen, DType::kF32), b = testing::random_tensor({3}, gen, DType::kF32);
  SafetensorsFile f;
  f.tensors = {{"b", b}, {"w", w}};
  Tensor tw = Tensor::zeros({2, 3}), tb = Tensor::zeros({3});
  Tensor backing = Tensor::zeros({3, 2});
  Tensor tw_t = backing.as_strided({2, 3}, {1, 2}, 0);  // a non-contiguous target
  load_named_tensors(f, {{"w", tw}, {"b", tb}}, "ckpt.safetensors");
  expect_same(tw, w, "w");
  expect_same(tb, b, "b");
  load_named_tensors(f, {{"w", tw_t}}, "ckpt.safetensors", false, /*allow_unexpected=*/true);
  expect_same(tw_t, w, "w transposed target");
}

TEST(LoadNamedTensors, ErrorsNameMissingMismatchedAndUnexpected) {
  SafetensorsFile f;
  f.tensors = {{"w", Tensor::zeros({2, 3})}, {"extra1", Tensor::zeros({1})}, {"extra2", Tensor::zeros({1})}};
  Tensor target = Tensor::full({2, 3}, 7.0);
  // missing
  EXPECT_TRUE(testing::throws_with(
      [&] { load_named_tensors(f, {{"w", target}, {"b", Tensor::zeros({3})}}, "ckpt.safetensors", false, true); },
      {"ckpt.safetensors: ", "missing 1 tensor: 'b'"}));
  load_named_tensors(f, {{"w", target}, {"b", Tensor::zeros({3})}}, "ckpt.safetensors", true, true);
  EXPECT_EQ(target.to_vector()[0], 0.0);
  target.fill_(7.0);
  // unexpected
  EXPECT_TRUE(testing::throws_with([&] { load_named_tensors(f, {{"w", target}}, "ckpt.safetensors"); },
                                   {"2 unexpected tensors: 'extra1', 'extra2'"}));
  EXPECT_EQ(target.to_vector()[0], 7.0) << "nothing is copied on error";
  // shape and dtype mismatches name both sides
  EXPECT_TRUE(testing::throws_with(
      [&] { load_named_tensors(f, {{"w", Tensor::zeros({3, 2})}}, "ckpt.safetensors", false, true); },
      {"tensor 'w' is F32[2, 3] in the file but F32[3, 2] is expected"}));
  EXPECT_TRUE(testing::throws_with(
      [&] { load_named_tensors(f, {{"w", Tensor::zeros({2, 3}, DType::kF64)}}, "ckpt.safetensors", false, true); },
      {"tensor 'w' is F32[2, 3] in the file but F64[2, 3] is expected"}));
  // everything at once, on one line
  try {
    load_named_tensors(f, {{"w", Tensor::zeros({3})}, {"q", Tensor::zeros({1})}}, "ckpt.safetensors");
    ADD_FAILURE() << "did not throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("missing 1 tensor: 'q'"), std::string::npos) << what;
    EXPECT_NE(what.find("tensor 'w' is F32[2, 3]"), std::string::npos) << what;
    EXPECT_NE(what.find("unexpected"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace vitddp
