#include "data/tar_shards.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <regex>
#include <sys/stat.h>
#include <unistd.h>

#include "data/image/image.h"
#include "framework/core/error.h"
#include "framework/core/random.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// An open shard, closed on scope exit.
class ShardFile {
 public:
  explicit ShardFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~ShardFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  int64_t size() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  }
  // Reads exactly `n` bytes at `offset`; false on a short read or an error.
  bool read_at(int64_t offset, void* out, size_t n) const {
    size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd_, static_cast<char*>(out) + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      done += static_cast<size_t>(got);
    }
    return true;
  }

 private:
  std::string path_;
  int fd_;
};

// A ustar number: octal text, or GNU's base-256 (high bit of the first byte set).
bool tar_number(const char* field, size_t n, int64_t* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(field);
  if (p[0] & 0x80) {
    int64_t v = p[0] & 0x7f;
    for (size_t i = 1; i < n; ++i) {
      if (v > (INT64_MAX >> 8)) return false;
      v = (v << 8) | p[i];
    }
    *out = v;
    return true;
  }
  int64_t v = 0;
  size_t i = 0;
  while (i < n && (field[i] == ' ' || field[i] == '\0')) ++i;
  bool any = false;
  for (; i < n && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v > (INT64_MAX >> 3)) return false;
    v = v * 8 + (field[i] - '0');
    any = true;
  }
  for (; i < n; ++i)
    if (field[i] != ' ' && field[i] != '\0') return false;
  *out = any ? v : 0;
  return true;
}

bool checksum_ok(const unsigned char* h) {
  int64_t stored = 0;
  if (!tar_number(reinterpret_cast<const char*>(h) + 148, 8, &stored)) return false;
  int64_t sum = 0;
  for (int i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : h[i];
  return sum == stored;
}

std::string field_string(const unsigned char* h, size_t at, size_t n) {
  const char* p = reinterpret_cast<const char*>(h) + at;
  return std::string(p, strnlen(p, n));
}

// WebDataset's base_plus_ext: the key is the path up to the first dot of its file name.
bool split_key(const std::string& path, std::string* key, std::string* ext) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos || dot == (slash == std::string::npos ? 0 : slash + 1)) return false;
  *key = path.substr(0, dot);
  *ext = path.substr(dot + 1);
  std::transform(ext->begin(), ext->end(), ext->begin(), [](unsigned char c) { return std::tolower(c); });
  return true;
}

}  // namespace

bool names_tar_shards(const std::string& spec) {
  if (ends_with(spec, ".tar") || spec.find('{') != std::string::npos) return true;
  std::error_code ec;
  if (!fs::is_directory(spec, ec)) return false;
  for (const fs::directory_entry& e : fs::directory_iterator(spec, ec))
    if (ends_with(e.path().filename().string(), ".tar")) return true;
  return false;
}

std::vector<std::string> expand_shard_spec(const std::string& spec) {
  std::vector<std::string> out;
  std::error_code ec;
  const std::regex brace(R"(^(.*)\{([0-9]+)\.\.([0-9]+)\}(.*)$)");
  std::smatch m;
  if (std::regex_match(spec, m, brace)) {
    const std::string first = m[2], last = m[3];
    const int64_t a = std::stoll(first), b = std::stoll(last);
    VITDDP_CHECK(a <= b && b - a < 10000000, spec, ": the shard range {", first, "..", last, "} is empty or too long");
    const size_t width = first.size();
    for (int64_t i = a; i <= b; ++i) {
      std::string number = std::to_string(i);
      if (number.size() < width) number.insert(0, width - number.size(), '0');
      out.push_back(m[1].str() + number + m[4].str());
    }
  } else if (fs::is_directory(spec, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(spec, ec))
      if (ends_with(e.path().filename().string(), ".tar")) out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
  } else {
    VITDDP_CHECK(spec.find('{') == std::string::npos, spec, ": a shard pattern is DIR/NAME-{000..127}.tar");
    out.push_back(spec);
  }
  VITDDP_CHECK(!out.empty(), spec, ": no .tar shards");
  for (const std::string& path : out) VITDDP_CHECK(fs::is_regular_file(path, ec), path, ": no such shard");
  return out;
}

TarShardDataset::TarShardDataset(const std::vector<std::string>& shards, std::shared_ptr<const ImageTransform> transform)
    : shard_paths_(shards), transform_(std::move(transform)) {
  for (int s = 0; s < static_cast<int>(shard_paths_.size()); ++s) {
    shard_first_.push_back(static_cast<int64_t>(samples_.size()));
    index_shard(s);
    shard_count_.push_back(static_cast<int64_t>(samples_.size()) - shard_first_.back());
    VITDDP_CHECK(shard_count_.back() > 0, shard_paths_[static_cast<size_t>(s)], ": a shard without samples");
  }
}

void TarShardDataset::index_shard(int s) {
  const std::string& path = shard_paths_[static_cast<size_t>(s)];
  ShardFile file(path);
  VITDDP_CHECK(file.ok(), path, ": cannot open the shard (", std::strerror(errno), ")");
  const int64_t file_size = file.size();
  unsigned char h[512];
  std::string long_name;  // from a GNU 'L' member, for the next one
  std::string key;        // the sample being gathered
  Sample current;
  bool has_image = false, has_label = false;
  auto finish = [&] {
    if (key.empty()) return;
    VITDDP_CHECK(has_image, path, ": sample '", key, "' has no .jpg, .jpeg or .png member");
    VITDDP_CHECK(has_label, path, ": sample '", key, "' has no .cls member (its label)");
    current.shard = s;
    current.key = key;
    max_label_ = std::max(max_label_, current.label);
    samples_.push_back(current);
    current = Sample();
    has_image = has_label = false;
  };
  int64_t at = 0;
  for (;;) {
    if (at + 512 > file_size) {
      VITDDP_CHECK(at == file_size, path, ": truncated (a partial header at byte ", at, " of ", file_size, ")");
      break;  // no end-of-archive blocks: the last member ended the file
    }
    VITDDP_CHECK(file.read_at(at, h, 512), path, ": cannot read the header at byte ", at);
    if (std::all_of(h, h + 512, [](unsigned char c) { return c == 0; })) break;  // end of archive
    VITDDP_CHECK(checksum_ok(h), path, ": not a tar file, or damaged (bad header checksum at byte ", at, ")");
    int64_t size = 0;
    VITDDP_CHECK(tar_number(reinterpret_cast<const char*>(h) + 124, 12, &size) && size >= 0, path,
                 ": bad member size at byte ", at);
    const int64_t data = at + 512;
    VITDDP_CHECK(data + size <= file_size, path, ": truncated (member at byte ", at, " needs ", size,
                 " bytes, the file ends ", file_size - data, " bytes after its header)");
    const char type = static_cast<char>(h[156]);
    std::string name = field_string(h, 0, 100);
    const std::string prefix = field_string(h, 345, 155);
    if (std::memcmp(h + 257, "ustar", 5) == 0 && !prefix.empty()) name = prefix + "/" + name;
    if (!long_name.empty()) name = std::move(long_name), long_name.clear();
    if (type == 'L') {  // GNU long name: the next member's
      VITDDP_CHECK(size > 0 && size < (1 << 20), path, ": bad long name at byte ", at);
      std::string text(static_cast<size_t>(size), '\0');
      VITDDP_CHECK(file.read_at(data, text.data(), text.size()), path, ": cannot read at byte ", data);
      long_name = text.substr(0, strnlen(text.c_str(), text.size()));
    } else if (type == '0' || type == '\0') {
      std::string member_key, ext;
      if (split_key(name, &member_key, &ext)) {
        if (member_key != key) {
          finish();
          key = member_key;
        }
        if (ext == "jpg" || ext == "jpeg" || ext == "png") {
          current.offset = data;
          current.bytes = size;
          has_image = true;
        } else if (ext == "cls") {
          VITDDP_CHECK(size > 0 && size <= 32, path, ": sample '", key, "': its .cls is not a label");
          char text[33] = {0};
          VITDDP_CHECK(file.read_at(data, text, static_cast<size_t>(size)), path, ": cannot read at byte ", data);
          char* end = nullptr;
          errno = 0;
          const long long label = std::strtoll(text, &end, 10);
          while (end && *end && std::isspace(static_cast<unsigned char>(*end))) ++end;
          VITDDP_CHECK(errno == 0 && end != text && end && *end == '\0' && label >= 0 && label < (1LL << 31), path,
                       ": sample '", key, "': its .cls '", std::string(text), "' is not a label (0, 1, 2, ...)");
          current.label = label;
          has_label = true;
        }
      }
    }
    // Other members (folders, pax headers, other extensions) are skipped.
    at = data + (size + 511) / 512 * 512;
  }
  finish();
}

void TarShardDataset::get(int64_t index, float* image_out, int64_t* label_out) const {
  get_drawn(index, 0, image_out, label_out);
}

void TarShardDataset::get_drawn(int64_t index, uint64_t draw, float* image_out, int64_t* label_out) const {
  VITDDP_CHECK(index >= 0 && index < size(), "tar shards: index ", index, " out of range [0, ", size(), ")");
  const Sample& s = samples_[static_cast<size_t>(index)];
  ShardFile file(shard_paths_[static_cast<size_t>(s.shard)]);
  if (!file.ok()) throw BadSample(std::string("cannot open its shard (") + std::strerror(errno) + ")");
  std::vector<uint8_t> bytes(static_cast<size_t>(s.bytes));
  if (!file.read_at(s.offset, bytes.data(), bytes.size())) throw BadSample("cannot read it from its shard");
  transform_->apply(bytes.data(), bytes.size(), draw, image_out);
  *label_out = s.label;
}

std::string TarShardDataset::sample_name(int64_t index) const {
  if (index < 0 || index >= size()) return Dataset::sample_name(index);
  const Sample& s = samples_[static_cast<size_t>(index)];
  return shard_paths_[static_cast<size_t>(s.shard)] + ":" + s.key;
}

ShardStreamOrder::ShardStreamOrder(std::vector<int64_t> shard_first, std::vector<int64_t> shard_samples,
                                   uint64_t seed, int rank, int world_size, bool shuffle)
    : first_(std::move(shard_first)), count_(std::move(shard_samples)), seed_(seed), rank_(rank), world_(world_size),
      shuffle_(shuffle) {
  VITDDP_CHECK(world_ > 0 && rank_ >= 0 && rank_ < world_, "shard order: rank ", rank_, " out of range for world size ",
               world_);
  VITDDP_CHECK(static_cast<int>(first_.size()) >= world_, first_.size(), " shard(s) for ", world_,
               " ranks: each rank reads whole shards; write at least one shard per rank");
  int64_t total = 0;
  for (int64_t c : count_) total += c;
  num_samples_ = total / world_;
  VITDDP_CHECK(num_samples_ > 0, "shard order: ", total, " samples for ", world_, " ranks");
}

std::vector<int64_t> ShardStreamOrder::indices_of(int64_t epoch) const {
  std::vector<int> shards(first_.size());
  for (size_t s = 0; s < shards.size(); ++s) shards[s] = static_cast<int>(s);
  const uint64_t epoch_seed = mix64(seed_, static_cast<uint64_t>(epoch));
  if (shuffle_) {
    Generator gen(epoch_seed);
    for (int64_t i = static_cast<int64_t>(shards.size()) - 1; i > 0; --i)
      std::swap(shards[i], shards[gen.next_u64() % static_cast<uint64_t>(i + 1)]);
  }
  std::vector<int64_t> stream;
  for (size_t k = static_cast<size_t>(rank_); k < shards.size(); k += static_cast<size_t>(world_))
    for (int64_t i = 0; i < count_[shards[k]]; ++i) stream.push_back(first_[shards[k]] + i);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  if (shuffle_) {  // a shuffle buffer over the stream, as WebDataset's shuffle(kShuffleBuffer)
    Generator gen(mix64(epoch_seed, static_cast<uint64_t>(rank_) + 1));
    std::vector<int64_t> buffer;
    size_t next = 0;
    while (static_cast<int64_t>(out.size()) < num_samples_ && (next < stream.size() || !buffer.empty())) {
      while (static_cast<int64_t>(buffer.size()) < kShuffleBuffer && next < stream.size()) buffer.push_back(stream[next++]);
      const size_t j = static_cast<size_t>(gen.next_u64() % buffer.size());
      out.push_back(buffer[j]);
      buffer[j] = buffer.back();
      buffer.pop_back();
    }
  } else {
    for (size_t i = 0; i < stream.size() && static_cast<int64_t>(out.size()) < num_samples_; ++i) out.push_back(stream[i]);
  }
  for (size_t i = 0; static_cast<int64_t>(out.size()) < num_samples_; ++i) out.push_back(out[i]);  // wrap around
  return out;
}

}  // namespace vitddp
