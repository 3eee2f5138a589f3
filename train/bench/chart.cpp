// The sweep's SVG bar chart. See train/bench/chart.h.
#include "train/bench/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

namespace vitddp::bench {
namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

// Thousands separators for axis and value labels: 12,345.
std::string grouped(double v, int decimals) {
  std::string s = num(v, decimals);
  size_t dot = s.find('.');
  size_t end = dot == std::string::npos ? s.size() : dot;
  size_t begin = (!s.empty() && s[0] == '-') ? 1 : 0;
  for (size_t i = end; i > begin + 3; i -= 3) s.insert(i - 3, ",");
  return s;
}

// Colour-blind-safe hues, by the order of distinct GPU counts (1 GPU grey, then blue, ...).
const char* kPalette[] = {"#8a94a6", "#2b6cb0", "#dd8452", "#55a868", "#8172b3", "#c44e52"};

constexpr const char* kFont = "Helvetica, Arial, sans-serif";

// The document's opening: size, white background, title and the line under it.
std::string svg_start(int width, int height, const std::string& title, const std::string& subtitle) {
  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
         std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " + std::to_string(height) +
         "\" font-family=\"" + kFont + "\">\n";
  svg += "  <rect x=\"0\" y=\"0\" width=\"" + std::to_string(width) + "\" height=\"" + std::to_string(height) +
         "\" fill=\"#ffffff\"/>\n";
  svg += "  <text x=\"24\" y=\"34\" font-size=\"20\" font-weight=\"bold\" fill=\"#1a202c\">" + xml_escape(title) +
         "</text>\n";
  svg += "  <text x=\"24\" y=\"56\" font-size=\"13\" fill=\"#4a5568\">" + xml_escape(subtitle) + "</text>\n";
  return svg;
}

}  // namespace

AxisScale nice_axis(double max_value, int max_ticks) {
  if (!(max_value > 0)) return {1, 0.2};
  double raw = max_value / std::max(1, max_ticks);
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  return {std::ceil(max_value / step - 1e-9) * step, step};
}

std::string throughput_chart_svg(const std::string& title, const std::vector<TableRow>& rows) {
  const int width = 960;
  const int bar_h = 26, gap = 14, top = 96, bottom = 64, right = 190;
  size_t longest = 8;
  for (const TableRow& t : rows) longest = std::max(longest, t.row.label.size());
  const int left = std::clamp(static_cast<int>(24 + 7.4 * longest), 140, 400);
  const int plot_w = width - left - right;
  const int plot_h = static_cast<int>(rows.size()) * (bar_h + gap) + gap;
  const int height = top + plot_h + bottom;

  double max_value = 0;
  for (const TableRow& t : rows)
    for (double v : {t.row.images_per_s, t.ideal_images_per_s})
      if (std::isfinite(v)) max_value = std::max(max_value, v);
  const AxisScale axis = nice_axis(max_value);
  auto x_of = [&](double v) { return left + plot_w * std::clamp(v / axis.max, 0.0, 1.0); };

  std::map<int, const char*> colour;  // GPU count -> hue
  for (const TableRow& t : rows) colour.emplace(t.row.gpus, "");
  size_t k = 0;
  for (auto& [gpus, c] : colour) c = kPalette[std::min(k++, std::size(kPalette) - 1)];

  std::string svg = svg_start(width, height, title,
                              "Training throughput, images per second (higher is better), with the speedup over the "
                              "baseline");

  // Legend: one swatch per GPU count, then the linear-scaling mark.
  double lx = 24;
  for (const auto& [gpus, c] : colour) {
    std::string text = std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs");
    svg += "  <rect x=\"" + num(lx) + "\" y=\"68\" width=\"14\" height=\"14\" rx=\"2\" fill=\"" + c + "\"/>\n";
    svg += "  <text x=\"" + num(lx + 20) + "\" y=\"80\" font-size=\"13\" fill=\"#2d3748\">" + text + "</text>\n";
    lx += 34 + 7.5 * text.size();
  }
  svg += "  <line x1=\"" + num(lx + 7) + "\" y1=\"66\" x2=\"" + num(lx + 7) +
         "\" y2=\"84\" stroke=\"#1a202c\" stroke-width=\"2\" stroke-dasharray=\"4 3\"/>\n";
  svg += "  <text x=\"" + num(lx + 20) +
         "\" y=\"80\" font-size=\"13\" fill=\"#2d3748\">linear scaling from the baseline</text>\n";

  // Gridlines and tick labels.
  svg += "  <g class=\"grid\">\n";
  for (double v = 0; v <= axis.max + axis.step * 1e-6; v += axis.step) {
    double x = x_of(v);
    svg += "    <line x1=\"" + num(x) + "\" y1=\"" + std::to_string(top) + "\" x2=\"" + num(x) + "\" y2=\"" +
           std::to_string(top + plot_h) + "\" stroke=\"" + (v == 0 ? "#4a5568" : "#d8dee6") + "\" stroke-width=\"1\"/>\n";
    svg += "    <text x=\"" + num(x) + "\" y=\"" + std::to_string(top + plot_h + 20) +
           "\" font-size=\"12\" fill=\"#4a5568\" text-anchor=\"middle\">" + grouped(v, axis.step < 1 ? 1 : 0) +
           "</text>\n";
  }
  svg += "  </g>\n";
  svg += "  <line x1=\"" + std::to_string(left) + "\" y1=\"" + std::to_string(top + plot_h) + "\" x2=\"" +
         std::to_string(left + plot_w) + "\" y2=\"" + std::to_string(top + plot_h) +
         "\" stroke=\"#4a5568\" stroke-width=\"1\"/>\n";
  svg += "  <text x=\"" + num(left + plot_w / 2.0) + "\" y=\"" + std::to_string(top + plot_h + 46) +
         "\" font-size=\"13\" fill=\"#2d3748\" text-anchor=\"middle\">images / s</text>\n";

  // Bars, labels, values, linear-scaling marks.
  for (size_t i = 0; i < rows.size(); ++i) {
    const TableRow& t = rows[i];
    double y = top + gap + static_cast<double>(i) * (bar_h + gap);
    // A failed run has no bar; an unknown speedup (no baseline) is "n/a"; linear scaling needs one.
    const bool failed = !t.row.failure.empty();
    const bool has_ideal = t.row.gpus > 1 && !failed && std::isfinite(t.ideal_images_per_s);
    double x_end = x_of(failed ? 0.0 : t.row.images_per_s);
    std::string value = failed ? "failed" : grouped(t.row.images_per_s, 1) + " img/s";
    std::string speedup = std::isfinite(t.speedup) ? num(t.speedup, 2) + "x" : "n/a";
    svg += "  <text x=\"" + std::to_string(left - 10) + "\" y=\"" + num(y + bar_h / 2.0 + 5) +
           "\" font-size=\"13\" fill=\"#1a202c\" text-anchor=\"end\">" + xml_escape(t.row.label) + "</text>\n";
    svg += "  <rect class=\"bar\" x=\"" + std::to_string(left) + "\" y=\"" + num(y) + "\" width=\"" +
           num(std::max(0.0, x_end - left)) + "\" height=\"" + std::to_string(bar_h) + "\" rx=\"2\" fill=\"" +
           colour[t.row.gpus] + "\"><title>" + xml_escape(t.row.label) + ": " +
           xml_escape(failed ? "failed: " + t.row.failure : value + ", " + speedup) + "</title></rect>\n";
    if (has_ideal) {
      double xi = x_of(t.ideal_images_per_s);
      svg += "  <line class=\"ideal\" x1=\"" + num(xi) + "\" y1=\"" + num(y - 3) + "\" x2=\"" + num(xi) + "\" y2=\"" +
             num(y + bar_h + 3) + "\" stroke=\"#1a202c\" stroke-width=\"2\" stroke-dasharray=\"4 3\"/>\n";
    }
    // The value goes right after the bar, or after the linear-scaling mark when it would cross it.
    double label_w = 7.2 * static_cast<double>(value.size() + speedup.size() + 3);
    double x_text = x_end + 8;
    if (has_ideal) {
      double xi = x_of(t.ideal_images_per_s);
      if (x_text + label_w > xi - 4 && x_text < xi + 4) x_text = std::max(x_end, xi) + 8;
    }
    svg += "  <text class=\"value\" x=\"" + num(x_text) + "\" y=\"" + num(y + bar_h / 2.0 + 5) +
           "\" font-size=\"13\" fill=\"#1a202c\">" + value +
           (failed ? std::string() : " \u00b7 <tspan font-weight=\"bold\">" + speedup + "</tspan>") + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

std::string accuracy_chart_svg(const std::string& title, const std::vector<TableRow>& rows) {
  std::vector<const TableRow*> shown;
  for (const TableRow& t : rows)
    if (t.row.accuracy && t.row.failure.empty()) shown.push_back(&t);
  const int width = 1480, height = 560, top = 96, panel_h = 360, gap = 90;
  const int left1 = 80, panel_w = (width - left1 - 2 * gap - 200) / 3, left2 = left1 + panel_w + gap;
  const int left3 = left2 + panel_w + gap;
  double max_images = 0, min_top1 = 1, max_steps = 1, max_loss = 0;
  std::optional<double> target;
  for (const TableRow* t : shown) {
    const AccuracySummary& a = *t->row.accuracy;
    max_images = std::max(max_images, t->row.images_per_s);
    min_top1 = std::min(min_top1, a.top1.min);
    for (const auto& curve : a.curves)
      for (const EvalPoint& p : curve) {
        max_steps = std::max(max_steps, static_cast<double>(p.after_step));
        min_top1 = std::min(min_top1, p.top1);
        max_loss = std::max(max_loss, p.loss);
      }
    if (a.target && a.target->metric == "eval_top1") target = a.target->value;
  }
  if (target) min_top1 = std::min(min_top1, *target);
  const AxisScale xs = nice_axis(max_images), ss = nice_axis(max_steps), ls = nice_axis(max_loss, 5);
  const double y_lo = std::max(0.0, std::floor(min_top1 * 10.0 - 1e-9) / 10.0);
  auto y_of = [&](double v) { return top + panel_h * (1.0 - std::clamp((v - y_lo) / (1.0 - y_lo), 0.0, 1.0)); };
  auto x1_of = [&](double v) { return left1 + panel_w * std::clamp(v / xs.max, 0.0, 1.0); };
  auto x2_of = [&](double v) { return left2 + panel_w * std::clamp(v / ss.max, 0.0, 1.0); };
  auto x3_of = [&](double v) { return left3 + panel_w * std::clamp(v / ss.max, 0.0, 1.0); };
  auto loss_y = [&](double v) { return top + panel_h * (1.0 - std::clamp(v / ls.max, 0.0, 1.0)); };

  std::string svg = svg_start(width, height, title,
                              "Left: throughput against the eval top-1 reached (median over seeds, bar: their range; "
                              "hollow: a seed missed the target). Then eval top-1 and eval loss against steps, a line per seed");
  // Axes and grids of both panels.
  for (double v = y_lo; v <= 1.0 + 1e-9; v += 0.1) {
    for (int panel = 0; panel < 2; ++panel) {
      const int l = panel == 0 ? left1 : left2;
      svg += "  <line x1=\"" + std::to_string(l) + "\" y1=\"" + num(y_of(v)) + "\" x2=\"" + std::to_string(l + panel_w) +
             "\" y2=\"" + num(y_of(v)) + "\" stroke=\"#d8dee6\" stroke-width=\"1\"/>\n";
      svg += "  <text x=\"" + std::to_string(l - 8) + "\" y=\"" + num(y_of(v) + 4) +
             "\" font-size=\"12\" fill=\"#4a5568\" text-anchor=\"end\">" + num(100 * v, 0) + "%</text>\n";
    }
  }
  for (double v = 0; v <= xs.max + xs.step * 1e-6; v += xs.step)
    svg += "  <text x=\"" + num(x1_of(v)) + "\" y=\"" + std::to_string(top + panel_h + 20) +
           "\" font-size=\"12\" fill=\"#4a5568\" text-anchor=\"middle\">" + grouped(v, xs.step < 1 ? 1 : 0) + "</text>\n";
  for (double v = 0; v <= ss.max + ss.step * 1e-6; v += ss.step)
    for (double x : {x2_of(v), x3_of(v)})
      svg += "  <text x=\"" + num(x) + "\" y=\"" + std::to_string(top + panel_h + 20) +
             "\" font-size=\"12\" fill=\"#4a5568\" text-anchor=\"middle\">" + grouped(v, 0) + "</text>\n";
  for (double v = 0; v <= ls.max + ls.step * 1e-6; v += ls.step) {
    svg += "  <line x1=\"" + std::to_string(left3) + "\" y1=\"" + num(loss_y(v)) + "\" x2=\"" +
           std::to_string(left3 + panel_w) + "\" y2=\"" + num(loss_y(v)) + "\" stroke=\"#d8dee6\" stroke-width=\"1\"/>\n";
    svg += "  <text x=\"" + std::to_string(left3 - 8) + "\" y=\"" + num(loss_y(v) + 4) +
           "\" font-size=\"12\" fill=\"#4a5568\" text-anchor=\"end\">" + num(v, ls.step < 1 ? 1 : 0) + "</text>\n";
  }
  svg += "  <text x=\"" + num(left3 + panel_w / 2.0) + "\" y=\"" + std::to_string(top + panel_h + 44) +
         "\" font-size=\"13\" fill=\"#2d3748\" text-anchor=\"middle\">steps (eval loss)</text>\n";
  svg += "  <text x=\"" + num(left1 + panel_w / 2.0) + "\" y=\"" + std::to_string(top + panel_h + 44) +
         "\" font-size=\"13\" fill=\"#2d3748\" text-anchor=\"middle\">images / s</text>\n";
  svg += "  <text x=\"" + num(left2 + panel_w / 2.0) + "\" y=\"" + std::to_string(top + panel_h + 44) +
         "\" font-size=\"13\" fill=\"#2d3748\" text-anchor=\"middle\">steps</text>\n";
  if (target)
    for (int panel = 0; panel < 2; ++panel) {
      const int l = panel == 0 ? left1 : left2;
      svg += "  <line class=\"target\" x1=\"" + std::to_string(l) + "\" y1=\"" + num(y_of(*target)) + "\" x2=\"" +
             std::to_string(l + panel_w) + "\" y2=\"" + num(y_of(*target)) +
             "\" stroke=\"#c44e52\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n";
    }
  for (size_t i = 0; i < shown.size(); ++i) {
    const TableRow& t = *shown[i];
    const AccuracySummary& a = *t.row.accuracy;
    const char* c = kPalette[1 + i % (std::size(kPalette) - 1)];
    const double x = x1_of(t.row.images_per_s);
    const bool missed = a.target && a.reached < a.seeds;
    svg += "  <line x1=\"" + num(x) + "\" y1=\"" + num(y_of(a.top1.min)) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(y_of(a.top1.max)) + "\" stroke=\"" + c + "\" stroke-width=\"2\"/>\n";
    svg += "  <circle class=\"mark\" cx=\"" + num(x) + "\" cy=\"" + num(y_of(a.top1.median)) + "\" r=\"6\" fill=\"" +
           (missed ? "#ffffff" : c) + "\" stroke=\"" + c + "\" stroke-width=\"2\"><title>" + xml_escape(t.row.label) +
           ": " + num(100 * a.top1.median, 2) + "% top-1, " + grouped(t.row.images_per_s, 1) + " img/s</title></circle>\n";
    for (const auto& curve : a.curves) {
      std::string points;
      for (const EvalPoint& p : curve)
        points += num(x2_of(static_cast<double>(p.after_step))) + "," + num(y_of(p.top1)) + " ";
      svg += "  <polyline points=\"" + points + "\" fill=\"none\" stroke=\"" + c +
             "\" stroke-width=\"1.5\" stroke-opacity=\"0.8\"/>\n";
      std::string loss_points;
      for (const EvalPoint& p : curve)
        loss_points += num(x3_of(static_cast<double>(p.after_step))) + "," + num(loss_y(p.loss)) + " ";
      svg += "  <polyline class=\"loss\" points=\"" + loss_points + "\" fill=\"none\" stroke=\"" + c +
             "\" stroke-width=\"1.5\" stroke-opacity=\"0.8\"/>\n";
    }
    // Legend at the right.
    const double ly = top + 8 + 22.0 * static_cast<double>(i);
    svg += "  <rect x=\"" + std::to_string(left3 + panel_w + 24) + "\" y=\"" + num(ly - 10) +
           "\" width=\"12\" height=\"12\" rx=\"2\" fill=\"" + c + "\"/>\n";
    svg += "  <text x=\"" + std::to_string(left3 + panel_w + 42) + "\" y=\"" + num(ly) +
           "\" font-size=\"12\" fill=\"#1a202c\">" + xml_escape(t.row.label) + (missed ? " (misses)" : "") +
           "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace vitddp::bench
