#include "framework/core/message_text.h"
#include "framework/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "framework/core/error.h"
#include "framework/io/atomic_file.h"
#include "framework/io/json_structure_pass.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors I/O copies raw bytes and assumes a little-endian host");

namespace vitddp {

namespace {

std::string quote(const std::string& text, size_t max_len = 120) { return quote_for_message(text, max_len); }
std::string sanitize(const std::string& text, size_t max_len = 300) { return sanitize_for_message(text, max_len); }

using ojson = nlohmann::ordered_json;  // writing: the header in the order we give it
// Reading parses into std::map-backed JSON and keeps the tensors' order from the parser's key
// events: ordered_json finds each key by a linear search, so a hostile header with a million
// names took about 5e11 comparisons to parse.
using rjson = nlohmann::json;



template <typename... Args>
[[noreturn]] void fail(const std::string& label, const Args&... args) {
  throw Error(detail::concat(label, ": ", args...));
}

std::string errno_text(int err) { return std::strerror(err); }

struct Entry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

std::string offsets_str(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

std::string typed_shape(DType dtype, const Shape& shape) {
  return std::string(safetensors_dtype_name(dtype)) + shape_str(shape);
}

const char* json_type(const rjson& j) { return j.type_name(); }

// The parsed header and its top-level keys in file order.
struct ParsedHeader {
  rjson json;
  std::vector<std::string> order;
};

// One linear pass over the header (framework/io/json_structure_pass.h): nesting depth, duplicate
// keys and the tensors' order.
class HeaderShape final : public JsonStructurePass {
 public:
  explicit HeaderShape(const std::string& label) : label_(label) {}
  std::vector<std::string> order;

  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return open();
  }
  bool key(string_t& key) override {
    if (!keys_.back().insert(key).second) {
      if (keys_.size() == 1) fail(label_, "duplicate tensor name ", quote(key), " in the header");
      fail(label_, "duplicate key ", quote(key), " in the header");
    }
    if (keys_.size() == 1 && depth_ == 1) order.push_back(key);
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at ..."
    if (what.rfind("[json.exception.", 0) == 0 && what.find("] ") != std::string::npos)
      what = what.substr(what.find("] ") + 2);
    fail(label_, "header is not valid JSON (", sanitize(what), ")");
  }

 private:
  bool open() {
    // The format needs 3 levels (header, entry, shape); deeper input is hostile.
    if (++depth_ > 3) fail(label_, "header JSON is nested deeper than the format allows");
    return true;
  }
  const std::string& label_;
  std::vector<std::unordered_set<std::string>> keys_;  // one set per open object
  int depth_ = 0;
};

// Parses the JSON with duplicate-key and nesting-depth checks; throws one-line errors.
ParsedHeader parse_json(const char* text, size_t size, const std::string& label) {
  // nlohmann stops at a NUL byte as if the input ended there; JSON has no place for one.
  if (const void* nul = std::memchr(text, 0, size))
    fail(label, "header is not valid JSON (NUL byte at offset ", static_cast<const char*>(nul) - text, ")");
  HeaderShape shape(label);  // first: a hostile header fails here, before any tree is built
  rjson::sax_parse(text, text + size, &shape, nlohmann::detail::input_format_t::json, /*strict=*/true,
                   /*ignore_comments=*/false);
  try {
    return {rjson::parse(text, text + size, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/false),
            std::move(shape.order)};
  } catch (const rjson::exception& e) {  // the SAX pass accepted it: not expected
    fail(label, "header is not valid JSON (", sanitize(e.what()), ")");
  }
}

// Reads a non-negative JSON integer into *out; false if `j` is anything else.
bool get_u64(const rjson& j, uint64_t* out) {
  if (!j.is_number_unsigned()) return false;
  *out = j.get<uint64_t>();
  return true;
}

Entry parse_entry(const std::string& name, const rjson& j, uint64_t data_size, const std::string& label) {
  const std::string what = "tensor " + quote(name);
  if (!j.is_object()) fail(label, what, " must be a JSON object, got ", json_type(j));
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(label, what, " has unknown key ", quote(key), " (expected dtype, shape, data_offsets)");
  }
  Entry e;
  e.name = name;
  // dtype
  auto it = j.find("dtype");
  if (it == j.end()) fail(label, what, " has no dtype");
  if (!it->is_string()) fail(label, what, " dtype must be a string, got ", json_type(*it));
  const std::string& dtype_text = it->get_ref<const std::string&>();
  if (!dtype_from_safetensors_name(dtype_text, &e.dtype))
    fail(label, what, " has unsupported dtype ", quote(dtype_text), " (supported: F32, F64, BF16, F16, I64)");
  // shape
  it = j.find("shape");
  if (it == j.end()) fail(label, what, " has no shape");
  if (!it->is_array()) fail(label, what, " shape must be an array, got ", json_type(*it));
  if (it->size() > static_cast<size_t>(kSafetensorsMaxRank))
    fail(label, what, " has rank ", it->size(), ", more than the limit of ", kSafetensorsMaxRank);
  for (const rjson& d : *it) {
    uint64_t dim = 0;
    if (d.is_number_integer() && !d.is_number_unsigned())
      fail(label, what, " has negative dimension ", d.get<int64_t>(), " in its shape");
    if (!get_u64(d, &dim)) fail(label, what, " shape must hold non-negative integers, got ", sanitize(d.dump(), 40));
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(label, what, " has dimension ", dim, " in its shape, too large");
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  // data_offsets
  it = j.find("data_offsets");
  if (it == j.end()) fail(label, what, " has no data_offsets");
  if (!it->is_array() || it->size() != 2 || !get_u64((*it)[0], &e.begin) || !get_u64((*it)[1], &e.end))
    fail(label, what, " data_offsets must be two non-negative integers [begin, end], got ", sanitize(it->dump(), 60));
  if (e.end < e.begin) fail(label, what, " data_offsets ", offsets_str(e.begin, e.end), " end before they begin");
  if (e.end > data_size)
    fail(label, what, " data_offsets ", offsets_str(e.begin, e.end), " go past the end of the data (",
         data_size, " bytes)");
  // element count and byte size, without overflow
  const uint64_t elem = dtype_size(e.dtype);
  uint64_t numel = 1;
  bool overflow = false;
  // The product of the non-zero dimensions must fit too: the strides are products of them even
  // when another dimension is 0 (an empty tensor of shape [0, 2^32, 2^32] has a stride of 2^64).
  bool has_zero = false;
  for (int64_t d : e.shape) {
    if (d == 0) {
      has_zero = true;
      continue;
    }
    if (numel > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) overflow = true;
    else numel *= static_cast<uint64_t>(d);
  }
  if (overflow || numel > std::numeric_limits<uint64_t>::max() / elem ||
      numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(label, what, " shape ", typed_shape(e.dtype, e.shape), " has too many elements");
  if (has_zero) numel = 0;
  const uint64_t need = numel * elem;
  if (e.end - e.begin != need)
    fail(label, what, " data_offsets ", offsets_str(e.begin, e.end), " hold ", e.end - e.begin, " bytes but ",
         typed_shape(e.dtype, e.shape), " needs ", need);
  return e;
}

struct Header {
  std::vector<Entry> entries;  // header order
  std::map<std::string, std::string> metadata;
};

Header parse_header(const char* text, size_t size, uint64_t data_size, const std::string& label) {
  const ParsedHeader parsed = parse_json(text, size, label);
  const rjson& j = parsed.json;
  if (!j.is_object()) fail(label, "header must be a JSON object, got ", json_type(j));
  Header h;
  for (const std::string& key : parsed.order) {
    const rjson& value = j.at(key);
    if (key == "__metadata__") {
      const rjson& m = value;
      if (!m.is_object()) fail(label, "__metadata__ must be an object of strings, got ", json_type(m));
      for (const auto& kv : m.items()) {
        if (!kv.value().is_string())
          fail(label, "__metadata__ value for ", quote(kv.key()), " must be a string, got ", json_type(kv.value()));
        h.metadata[kv.key()] = kv.value().get<std::string>();
      }
      continue;
    }
    if (key.empty()) fail(label, "header has a tensor with an empty name");
    if (key.rfind("__", 0) == 0) fail(label, "header has unknown reserved key ", quote(key));
    h.entries.push_back(parse_entry(key, value, data_size, label));
  }
  // The tensors must tile the data region exactly: sorted by offset, each starts where the
  // previous one ended, and the last ends at the end of the file.
  std::vector<const Entry*> sorted;
  for (const Entry& e : h.entries) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : sorted) {
    if (e->begin < cursor)
      fail(label, "tensor ", quote(e->name), " data_offsets ", offsets_str(e->begin, e->end), " overlap tensor ",
           quote(prev->name), " at ", offsets_str(prev->begin, prev->end));
    if (e->begin > cursor)
      fail(label, "data bytes [", cursor, ", ", e->begin, ") belong to no tensor (gap before tensor ", quote(e->name),
           ")");
    cursor = e->end;
    prev = e;
  }
  if (cursor != data_size)
    fail(label, data_size - cursor, " trailing bytes after the last tensor (data region is ", data_size,
         " bytes, tensors cover ", cursor, ")");
  return h;
}

using ReadAt = std::function<void(uint64_t offset, void* dst, size_t n)>;

// The shared reader: `read_at` reads exactly n bytes at offset (offsets are checked first).
SafetensorsFile read_from(uint64_t file_size, const ReadAt& read_at, const std::string& label) {
  if (file_size < 8)
    fail(label, "file is ", file_size, " bytes, too short for the 8-byte header length (not a safetensors file?)");
  unsigned char len_bytes[8];
  read_at(0, len_bytes, 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kSafetensorsMaxHeaderBytes)
    fail(label, "header length ", header_len, " exceeds the limit of ", kSafetensorsMaxHeaderBytes,
         " bytes (corrupt length or not a safetensors file)");
  if (header_len > file_size - 8)
    fail(label, "header length ", header_len, " exceeds the ", file_size - 8,
         " bytes after the length field (truncated file or corrupt length)");
  if (header_len == 0) fail(label, "header is empty");
  std::string text(header_len, '\0');
  read_at(8, text.data(), header_len);
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  Header h = parse_header(text.data(), text.size(), data_size, label);
  // All offsets are validated and the tensors do not overlap, so the allocations below add up
  // to exactly the data region of the file.
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  out.tensors.reserve(h.entries.size());
  for (const Entry& e : h.entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) read_at(data_start + e.begin, t.data_ptr(), e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

struct Prepared {
  std::string header;  // length field + JSON + padding
  std::vector<Tensor> host;
};

Prepared prepare(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  Prepared p;
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    VITDDP_CHECK(!name.empty(), "write_safetensors: empty tensor name");
    VITDDP_CHECK(name.rfind("__", 0) != 0, "write_safetensors: tensor name ", quote(name),
                 " starts with \"__\", which the format reserves");
    VITDDP_CHECK(seen.insert(name).second, "write_safetensors: duplicate tensor name ", quote(name));
    VITDDP_CHECK(tensor.defined(), "write_safetensors: tensor ", quote(name), " is undefined");
    Tensor host = tensor.to(Device::cpu()).contiguous();
    const uint64_t n = host.nbytes();
    ojson entry = ojson::object();
    entry["dtype"] = safetensors_dtype_name(host.dtype());
    entry["shape"] = host.shape();
    entry["data_offsets"] = {offset, offset + n};
    header[name] = std::move(entry);
    offset += n;
    p.host.push_back(std::move(host));
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const ojson::exception&) {
    throw Error("write_safetensors: a tensor name or metadata string is not valid UTF-8");
  }
  json.append((8 - json.size() % 8) % 8, ' ');  // keep the data 8-byte aligned, as the reference does
  uint64_t len = json.size();
  p.header.resize(8);
  for (int i = 0; i < 8; ++i) p.header[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  p.header += json;
  return p;
}

std::string join_names(const std::vector<std::string>& names, size_t max_listed = 10) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < max_listed; ++i) out += (i ? ", " : "") + quote(names[i]);
  if (names.size() > max_listed) out += " and " + std::to_string(names.size() - max_listed) + " more";
  return out;
}

}  // namespace

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

SafetensorsFile read_safetensors(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot read " + path + ": " + errno_text(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) throw Error("cannot read " + path + ": " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw Error("cannot read " + path + ": not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  ReadAt read_at = [&](uint64_t offset, void* dst, size_t n) {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t{1} << 30), static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        throw Error("cannot read " + path + ": " + errno_text(errno));
      }
      if (r == 0) fail(path, "file ended early (was it truncated while being read?)");
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
  };
  return read_from(file_size, read_at, path);
}

SafetensorsFile parse_safetensors(const void* data, size_t size, const std::string& label) {
  const char* base = static_cast<const char*>(data);
  ReadAt read_at = [&](uint64_t offset, void* dst, size_t n) {
    VITDDP_ASSERT(offset <= size && n <= size - offset, "read past the end of the buffer");
    std::memcpy(dst, base + offset, n);
  };
  return read_from(size, read_at, label);
}

std::string serialize_safetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  Prepared p = prepare(tensors, metadata);
  std::string out = std::move(p.header);
  for (const Tensor& t : p.host)
    if (t.nbytes() > 0) out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return out;
}

void stream_safetensors(const NamedTensors& tensors, const std::function<void(const char*, size_t)>& sink,
                        const std::map<std::string, std::string>& metadata) {
  Prepared p = prepare(tensors, metadata);
  sink(p.header.data(), p.header.size());
  for (const Tensor& t : p.host)
    if (t.nbytes() > 0) sink(static_cast<const char*>(t.data_ptr()), t.nbytes());
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  Prepared p = prepare(tensors, metadata);
  AtomicFileWriter file(path);
  file.write(p.header.data(), p.header.size());
  for (const Tensor& t : p.host)
    if (t.nbytes() > 0) file.write(t.data_ptr(), t.nbytes());
  file.commit();
}

void load_named_tensors(const SafetensorsFile& file, const NamedTensors& targets, const std::string& path,
                        bool allow_missing, bool allow_unexpected) {
  std::unordered_map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : file.tensors) by_name[name] = &t;
  std::unordered_set<std::string> wanted;
  std::vector<std::string> missing, problems;
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  for (const auto& [name, target] : targets) {
    VITDDP_CHECK(wanted.insert(name).second, "load_named_tensors: target name ", quote(name), " given twice");
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& src = *it->second;
    if (src.shape() != target.shape() || src.dtype() != target.dtype()) {
      problems.push_back("tensor " + quote(name) + " is " + typed_shape(src.dtype(), src.shape()) +
                         " in the file but " + typed_shape(target.dtype(), target.shape()) + " is expected");
      continue;
    }
    copies.emplace_back(target, &src);
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : file.tensors)
    if (!wanted.count(name)) unexpected.push_back(name);
  std::string message;
  auto add = [&](const std::string& part) { message += (message.empty() ? "" : "; ") + part; };
  if (!missing.empty() && !allow_missing)
    add("missing " + std::to_string(missing.size()) + " tensor" + (missing.size() == 1 ? "" : "s") + ": " +
        join_names(missing));
  for (size_t i = 0; i < problems.size() && i < 5; ++i) add(problems[i]);
  if (problems.size() > 5) add(std::to_string(problems.size() - 5) + " more tensors differ");
  if (!unexpected.empty() && !allow_unexpected)
    add(std::to_string(unexpected.size()) + " unexpected tensor" + (unexpected.size() == 1 ? "" : "s") + ": " +
        join_names(unexpected));
  if (!message.empty()) throw Error(path + ": " + message);
  for (auto& [target, src] : copies) target.copy_(*src);
}

}  // namespace vitddp
