#include "common/image_files.h"

#include <turbojpeg.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "framework/core/random.h"

namespace vitddp::testing {

std::vector<uint8_t> jpeg_bytes(int width, int height, uint64_t seed) {
  Generator gen(seed);
  double phase[3], freq[3];
  for (int c = 0; c < 3; ++c) {
    phase[c] = 6.28 * gen.uniform();
    freq[c] = 0.02 + 0.2 * gen.uniform();
  }
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c)
        rgb[(static_cast<size_t>(y) * width + x) * 3 + c] =
            static_cast<uint8_t>(127.5 + 120 * std::sin(freq[c] * (x + 2 * y) + phase[c]) + 7 * gen.uniform());
  tjhandle h = tjInitCompress();
  if (!h) throw std::runtime_error("tjInitCompress failed");
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(h, rgb.data(), width, 0, height, TJPF_RGB, &out, &size, TJSAMP_420, 90, 0);
  std::vector<uint8_t> bytes;
  if (rc == 0) bytes.assign(out, out + size);
  tjFree(out);
  tjDestroy(h);
  if (rc != 0) throw std::runtime_error("tjCompress2 failed");
  return bytes;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

std::vector<uint8_t> text_bytes(const std::string& text) { return {text.begin(), text.end()}; }

std::vector<uint8_t> tar_bytes(const std::vector<TarMember>& members) {
  std::vector<uint8_t> out;
  for (const TarMember& m : members) {
    uint8_t h[512] = {};
    if (m.first.size() >= 100) throw std::runtime_error("tar_bytes: name too long");
    std::memcpy(h, m.first.data(), m.first.size());
    std::snprintf(reinterpret_cast<char*>(h + 100), 8, "%07o", 0644);
    std::snprintf(reinterpret_cast<char*>(h + 108), 8, "%07o", 0);
    std::snprintf(reinterpret_cast<char*>(h + 116), 8, "%07o", 0);
    std::snprintf(reinterpret_cast<char*>(h + 124), 12, "%011o", static_cast<unsigned>(m.second.size()));
    std::snprintf(reinterpret_cast<char*>(h + 136), 12, "%011o", 0);
    h[156] = '0';
    std::memcpy(h + 257, "ustar", 6);
    std::memcpy(h + 263, "00", 2);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (uint8_t b : h) sum += b;
    std::snprintf(reinterpret_cast<char*>(h + 148), 8, "%06o", sum);
    h[155] = ' ';
    out.insert(out.end(), h, h + 512);
    out.insert(out.end(), m.second.begin(), m.second.end());
    out.resize((out.size() + 511) / 512 * 512, 0);
  }
  out.resize(out.size() + 1024, 0);
  return out;
}

}  // namespace vitddp::testing
