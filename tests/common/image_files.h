// Image files and tar shards for the data tests, made in C++ (no python needed): JPEGs through
// TurboJPEG, tar archives in the ustar layout WebDataset writes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace vitddp::testing {

// A width x height RGB JPEG (quality 90) of smooth random colours drawn from `seed`.
std::vector<uint8_t> jpeg_bytes(int width, int height, uint64_t seed);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> text_bytes(const std::string& text);

using TarMember = std::pair<std::string, std::vector<uint8_t>>;
// The archive of `members` (ustar, two zero blocks at the end).
std::vector<uint8_t> tar_bytes(const std::vector<TarMember>& members);

}  // namespace vitddp::testing
