// The sweep comparison table and its three formats. See train/bench/table.h.
#include "train/bench/table.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "framework/core/error.h"
#include "train/bench/chart.h"

namespace vitddp::bench {
namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

// A label inside a markdown table cell: '|' would end the cell.
std::string markdown_cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

// RFC 4180: quote fields holding a comma, quote or line break; double the quotes.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  VITDDP_CHECK(out.good(), "cannot write ", path, " (", std::strerror(errno), ")");
  out << text;
  out.close();
  VITDDP_CHECK(!out.fail(), "writing ", path, " failed (disk full?)");
}

}  // namespace

std::vector<TableRow> compute_table(const std::vector<BenchRow>& rows, const BenchRow& baseline) {
  VITDDP_CHECK(baseline.images_per_s > 0, "the baseline \"", baseline.label,
               "\" has no throughput (images/s = ", baseline.images_per_s, "); cannot compute speedups");
  std::vector<TableRow> out;
  for (const BenchRow& r : rows) {
    VITDDP_CHECK(r.gpus >= 1, "row \"", r.label, "\" has ", r.gpus, " GPUs; it needs at least 1");
    TableRow t;
    t.row = r;
    t.speedup = r.images_per_s / baseline.images_per_s;
    t.scaling_efficiency = t.speedup / r.gpus;
    t.ideal_images_per_s = baseline.images_per_s * r.gpus;
    out.push_back(t);
  }
  return out;
}

std::string table_markdown(const std::vector<TableRow>& rows) {
  std::string md =
      "| configuration | GPUs | steps/s | images/s | speedup | scaling efficiency | exposed comm (ms) | peak memory (MiB) |\n"
      "|---|--:|--:|--:|--:|--:|--:|--:|\n";
  for (const TableRow& t : rows) {
    const BenchRow& r = t.row;
    md += "| " + markdown_cell(r.label) + " | " + std::to_string(r.gpus) + " | " + fmt("%.2f", r.steps_per_s) + " | " +
          fmt("%.1f", r.images_per_s) + " | " + fmt("%.2fx", t.speedup) + " | " +
          fmt("%.1f%%", 100.0 * t.scaling_efficiency) + " | " + fmt("%.1f", r.exposed_comm_ms) + " | " +
          fmt("%.0f", r.peak_mib) + " |\n";
  }
  return md;
}

std::string table_csv(const std::vector<TableRow>& rows) {
  std::string csv = "configuration,gpus,steps_per_s,images_per_s,speedup,scaling_efficiency,exposed_comm_ms,peak_mib\n";
  for (const TableRow& t : rows) {
    const BenchRow& r = t.row;
    csv += csv_field(r.label) + "," + std::to_string(r.gpus) + "," + fmt("%.4f", r.steps_per_s) + "," +
           fmt("%.3f", r.images_per_s) + "," + fmt("%.4f", t.speedup) + "," + fmt("%.4f", t.scaling_efficiency) + "," +
           fmt("%.3f", r.exposed_comm_ms) + "," + fmt("%.1f", r.peak_mib) + "\n";
  }
  return csv;
}

nlohmann::json table_json(const std::vector<TableRow>& rows, const BenchRow& baseline) {
  auto row_json = [](const BenchRow& r) {
    return nlohmann::json{{"configuration", r.label},         {"gpus", r.gpus},
                          {"steps_per_s", r.steps_per_s},     {"images_per_s", r.images_per_s},
                          {"exposed_comm_ms", r.exposed_comm_ms}, {"peak_mib", r.peak_mib}};
  };
  nlohmann::json out_rows = nlohmann::json::array();
  for (const TableRow& t : rows) {
    nlohmann::json j = row_json(t.row);
    j["speedup"] = t.speedup;
    j["scaling_efficiency"] = t.scaling_efficiency;
    out_rows.push_back(j);
  }
  return {{"baseline", row_json(baseline)}, {"rows", out_rows}};
}

std::vector<std::string> write_table_files(const std::string& stem, const std::string& title,
                                           const std::vector<TableRow>& rows, const BenchRow& baseline) {
  std::vector<std::string> paths = {stem + ".md", stem + ".csv", stem + ".json", stem + ".svg"};
  write_file(paths[0], "# " + title + "\n\n" + table_markdown(rows));
  write_file(paths[1], table_csv(rows));
  write_file(paths[2], table_json(rows, baseline).dump(2) + "\n");
  write_file(paths[3], throughput_chart_svg(title, rows));
  return paths;
}

}  // namespace vitddp::bench
