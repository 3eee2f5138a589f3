// The sweep's SVG chart: well-formed XML (checked by a small tag matcher, no XML library in CI),
// one bar per row in order with widths proportional to images/s, escaped labels, and axes with
// 1-2-5 ticks. Rendering to PNG (rsvg-convert, ImageMagick) is a manual check, not a test.
#include <gtest/gtest.h>

#include <regex>
#include <vector>

#include "train/bench/chart.h"

namespace vitddp::bench {
namespace {

// Tags balance and nest; attribute values are quoted; '&' starts an entity. Enough to catch a
// broken writer (an XML parser would accept nothing this rejects).
::testing::AssertionResult well_formed_xml(const std::string& xml) {
  std::vector<std::string> open;
  size_t i = 0;
  while (i < xml.size()) {
    if (xml[i] == '&') {
      size_t semi = xml.find(';', i);
      std::string entity = xml.substr(i, semi == std::string::npos ? 8 : semi - i + 1);
      if (!std::regex_match(entity, std::regex("&(amp|lt|gt|quot|apos|#[0-9]+);")))
        return ::testing::AssertionFailure() << "bad entity at " << i << ": " << entity;
      i = semi + 1;
      continue;
    }
    if (xml[i] != '<') {
      if (xml[i] == '>') return ::testing::AssertionFailure() << "stray '>' at " << i;
      ++i;
      continue;
    }
    size_t end = i + 1;
    char quote = 0;
    for (; end < xml.size(); ++end) {
      if (quote) {
        if (xml[end] == quote) quote = 0;
        else if (xml[end] == '<') return ::testing::AssertionFailure() << "'<' inside an attribute at " << end;
      } else if (xml[end] == '"' || xml[end] == '\'') {
        quote = xml[end];
      } else if (xml[end] == '>') {
        break;
      }
    }
    if (end >= xml.size()) return ::testing::AssertionFailure() << "unclosed tag at " << i;
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      std::string name = tag.substr(1);
      if (open.empty() || open.back() != name)
        return ::testing::AssertionFailure() << "</" << name << "> closes " << (open.empty() ? "nothing" : open.back());
      open.pop_back();
      continue;
    }
    if (tag.back() == '/') continue;
    open.push_back(tag.substr(0, tag.find_first_of(" \t\n")));
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "<" << open.back() << "> never closed";
  return ::testing::AssertionSuccess();
}

std::vector<TableRow> sample() {
  BenchRow base{"no DDP, 1 GPU", 1, 12.0, 384.0, 0, 4807};
  return compute_table({base,
                        {"DDP 2 GPUs, 25 MB <NVLink> & P2P", 2, 11.4, 729.6, 3.2, 4807},
                        {"DDP 2 GPUs, 2000 MB, P2P off", 2, 7.97, 510.1, 30.1, 4807}},
                       base);
}

TEST(Chart, IsWellFormedWithOneBarPerRow) {
  std::string svg = throughput_chart_svg("seed article & co, 2 GPUs", sample());
  EXPECT_TRUE(well_formed_xml(svg));
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);

  std::regex bar(R"re(<rect class="bar" x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)")re");
  std::vector<double> widths, ys;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), bar); it != std::sregex_iterator(); ++it) {
    ys.push_back(std::stod((*it)[2]));
    widths.push_back(std::stod((*it)[3]));
  }
  ASSERT_EQ(widths.size(), 3u);
  EXPECT_LT(ys[0], ys[1]);  // rows top to bottom, in order
  EXPECT_LT(ys[1], ys[2]);
  EXPECT_NEAR(widths[1] / widths[0], 729.6 / 384.0, 0.01);  // proportional to images/s
  EXPECT_NEAR(widths[2] / widths[0], 510.1 / 384.0, 0.01);
}

TEST(Chart, EscapesLabelsAndShowsValues) {
  std::string svg = throughput_chart_svg("t", sample());
  EXPECT_NE(svg.find("DDP 2 GPUs, 25 MB &lt;NVLink&gt; &amp; P2P"), std::string::npos);
  EXPECT_EQ(svg.find("<NVLink>"), std::string::npos);
  EXPECT_NE(svg.find("729.6 img/s \u00b7 <tspan font-weight=\"bold\">1.90x</tspan>"), std::string::npos);
  EXPECT_NE(svg.find(">images / s</text>"), std::string::npos);
  EXPECT_NE(svg.find("2 GPUs</text>"), std::string::npos);  // legend
}

TEST(Chart, EmptyRowsStillWellFormed) { EXPECT_TRUE(well_formed_xml(throughput_chart_svg("empty", {}))); }

TEST(Chart, AxisUsesOneTwoFiveSteps) {
  AxisScale a = nice_axis(729.6);
  EXPECT_DOUBLE_EQ(a.step, 200);
  EXPECT_DOUBLE_EQ(a.max, 800);
  a = nice_axis(3588);
  EXPECT_DOUBLE_EQ(a.step, 1000);
  EXPECT_DOUBLE_EQ(a.max, 4000);
  a = nice_axis(1000);
  EXPECT_DOUBLE_EQ(a.max, 1000);
  a = nice_axis(0.9);
  EXPECT_GE(a.max, 0.9);
  EXPECT_GT(a.step, 0);
}

}  // namespace
}  // namespace vitddp::bench
