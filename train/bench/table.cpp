// The sweep comparison table and its three formats. See train/bench/table.h.
#include "train/bench/table.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>
#include <cstring>
#include <fstream>

#include "framework/core/error.h"
#include "train/bench/chart.h"

namespace vitddp::bench {
namespace {

// `v` in `format`, or "n/a" (markdown) / "" (CSV) when it is unknown (NaN, or an empty optional).
std::string fmt(const char* format, double v, const char* unknown = "n/a") {
  if (!std::isfinite(v)) return unknown;
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}
double value_or_nan(const std::optional<double>& v) {
  return v ? *v : std::numeric_limits<double>::quiet_NaN();
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

bool any_repeated(const std::vector<TableRow>& rows) {
  for (const TableRow& t : rows)
    if (t.row.launch_steps_per_s.size() > 1) return true;
  return false;
}

// "84.58-90.66 (6)": the lowest and highest of a row's launches, and how many; "" for one launch.
std::string launch_range(const BenchRow& r) {
  if (r.launch_steps_per_s.size() < 2) return "";
  const auto [lo, hi] = std::minmax_element(r.launch_steps_per_s.begin(), r.launch_steps_per_s.end());
  return fmt("%.2f", *lo) + "-" + fmt("%.2f", *hi) + " (" + std::to_string(r.launch_steps_per_s.size()) + ")";
}

bool any_accuracy(const std::vector<TableRow>& rows) {
  for (const TableRow& t : rows)
    if (t.row.accuracy) return true;
  return false;
}

// "0.9667 (0.9611-0.9750)": a median and its range over seeds; the median alone for one seed.
std::string spread_text(const Spread& s, const char* format) {
  if (s.min == s.max) return fmt(format, s.median);
  return fmt(format, s.median) + " (" + fmt(format, s.min) + "-" + fmt(format, s.max) + ")";
}

// "3/3: 700 steps, 61.2 s"; "0/3: not reached"; "" without a target.
std::string target_text(const AccuracySummary& a) {
  if (!a.target) return "";
  std::string out = std::to_string(a.reached) + "/" + std::to_string(a.seeds);
  if (!a.steps_to_target) return out + ": not reached";
  return out + ": " + fmt("%.0f", a.steps_to_target->median) + " steps, " + fmt("%.1f", a.seconds_to_target->median) +
         " s";
}

// The accuracy cells of a row (markdown): seeds, top-1, loss, to target, verdict.
std::string accuracy_cells(const TableRow& t) {
  if (!t.row.accuracy) return " |  |  |  |  |";
  const AccuracySummary& a = *t.row.accuracy;
  return " " + std::to_string(a.seeds) + " | " + spread_text(a.top1, "%.4f") + " | " + spread_text(a.loss, "%.4f") +
         " | " + target_text(a) + " | " + (t.accuracy_verdict.empty() ? "n/a" : t.accuracy_verdict) + " |";
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
    if (!r.failure.empty()) {
      out.push_back(t);
      continue;
    }
    // Against the baseline's worker count: a 4-rank row over a 4-rank baseline scales by 1.
    const double workers = static_cast<double>(r.gpus) / std::max(baseline.gpus, 1);
    t.speedup = r.images_per_s / baseline.images_per_s;
    t.scaling_efficiency = t.speedup / workers;
    t.ideal_images_per_s = baseline.images_per_s * workers;
    if (r.accuracy && baseline.accuracy) t.accuracy_verdict = accuracy_verdict(*r.accuracy, *baseline.accuracy);
    out.push_back(t);
  }
  return out;
}

size_t median_launch_index(const std::vector<BenchRow>& launches) {
  VITDDP_CHECK(!launches.empty(), "median_launch_index: no launches");
  std::vector<size_t> order(launches.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return launches[a].images_per_s < launches[b].images_per_s; });
  return order[(order.size() - 1) / 2];
}

std::vector<TableRow> table_without_baseline(const std::vector<BenchRow>& rows) {
  const double unknown = std::numeric_limits<double>::quiet_NaN();
  std::vector<TableRow> out;
  for (const BenchRow& r : rows) out.push_back({r, unknown, unknown, unknown, ""});
  return out;
}

std::string table_markdown(const std::vector<TableRow>& rows) {
  const bool repeated = any_repeated(rows), accuracy = any_accuracy(rows);
  std::string md =
      "| configuration | GPUs | steps/s | images/s | speedup | scaling efficiency | exposed comm (ms) | peak memory (MiB) "
      "| MFU |" +
      std::string(repeated ? " launches (steps/s) |" : "") +
      (accuracy ? " seeds | eval top-1 | eval loss | to target | accuracy |" : "") +
      "\n|---|--:|--:|--:|--:|--:|--:|--:|--:|" + (repeated ? "--:|" : "") + (accuracy ? "--:|--:|--:|--:|---|" : "") +
      "\n";
  for (const TableRow& t : rows) {
    const BenchRow& r = t.row;
    md += "| " + markdown_cell(r.label) + " | " + std::to_string(r.gpus) + " | ";
    if (!r.failure.empty()) {
      md += "failed: " + markdown_cell(r.failure) + " |  |  |  |  |  |  |" + (repeated ? "  |" : "") +
            (accuracy ? " |  |  |  |  |" : "") + "\n";
      continue;
    }
    md += fmt("%.2f", r.steps_per_s) + " | " + fmt("%.1f", r.images_per_s) + " | " + fmt("%.2fx", t.speedup) + " | " +
          fmt("%.1f%%", 100.0 * t.scaling_efficiency) + " | " + fmt("%.1f", value_or_nan(r.exposed_comm_ms)) + " | " +
          fmt("%.0f", r.peak_mib) + " | " + fmt("%.1f%%", value_or_nan(r.mfu_pct)) + " |" +
          (repeated ? " " + launch_range(r) + " |" : "") + (accuracy ? accuracy_cells(t) : "") + "\n";
  }
  return md;
}

std::string table_csv(const std::vector<TableRow>& rows) {
  const bool repeated = any_repeated(rows), accuracy = any_accuracy(rows);
  std::string csv = std::string("configuration,gpus,steps_per_s,images_per_s,speedup,scaling_efficiency,exposed_comm_ms,"
                                "peak_mib,mfu_pct,") +
                    (repeated ? "launch_steps_per_s," : "") +
                    (accuracy ? "seeds,eval_top1,eval_top1_min,eval_top1_max,eval_loss,eval_loss_min,eval_loss_max,"
                                "target,reached,steps_to_target,seconds_to_target,accuracy," : "") +
                    "status\n";
  for (const TableRow& t : rows) {
    const BenchRow& r = t.row;
    csv += csv_field(r.label) + "," + std::to_string(r.gpus) + ",";
    if (!r.failure.empty()) {
      csv += std::string(",,,,,,,") + (repeated ? "," : "") + (accuracy ? ",,,,,,,,,,,," : "") +
             csv_field("failed: " + r.failure) + "\n";
      continue;
    }
    csv += fmt("%.4f", r.steps_per_s, "") + "," + fmt("%.3f", r.images_per_s, "") + "," + fmt("%.4f", t.speedup, "") +
           "," + fmt("%.4f", t.scaling_efficiency, "") + "," + fmt("%.3f", value_or_nan(r.exposed_comm_ms), "") + "," +
           fmt("%.1f", r.peak_mib, "") + "," + fmt("%.2f", value_or_nan(r.mfu_pct), "") + ",";
    if (repeated) {
      std::string all;
      for (double v : r.launch_steps_per_s) all += (all.empty() ? "" : ";") + fmt("%.4f", v, "");
      csv += all + ",";
    }
    if (accuracy) {
      if (const std::optional<AccuracySummary>& a = r.accuracy) {
        csv += std::to_string(a->seeds) + "," + fmt("%.6f", a->top1.median, "") + "," + fmt("%.6f", a->top1.min, "") +
               "," + fmt("%.6f", a->top1.max, "") + "," + fmt("%.6f", a->loss.median, "") + "," +
               fmt("%.6f", a->loss.min, "") + "," + fmt("%.6f", a->loss.max, "") + "," +
               csv_field(a->target ? a->target->describe() : "") + "," +
               (a->target ? std::to_string(a->reached) : "") + "," +
               (a->steps_to_target ? fmt("%.0f", a->steps_to_target->median, "") : "") + "," +
               (a->seconds_to_target ? fmt("%.3f", a->seconds_to_target->median, "") : "") + "," +
               csv_field(t.accuracy_verdict) + ",";
      } else {
        csv += ",,,,,,,,,,,,";
      }
    }
    csv += "ok\n";
  }
  return csv;
}

nlohmann::json table_json(const std::vector<TableRow>& rows, const BenchRow& baseline) {
  // Unknown values (a failed run, n/a) are null.
  auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  auto row_json = [&](const BenchRow& r) {
    const bool ok = r.failure.empty();
    nlohmann::json j{{"configuration", r.label},
                     {"gpus", r.gpus},
                     {"status", ok ? "ok" : "failed"},
                     {"steps_per_s", ok ? number(r.steps_per_s) : nlohmann::json()},
                     {"images_per_s", ok ? number(r.images_per_s) : nlohmann::json()},
                     {"exposed_comm_ms", ok ? number(value_or_nan(r.exposed_comm_ms)) : nlohmann::json()},
                     {"peak_mib", ok ? number(r.peak_mib) : nlohmann::json()},
                     {"mfu_pct", ok ? number(value_or_nan(r.mfu_pct)) : nlohmann::json()}};
    if (!ok) j["error"] = r.failure;
    if (r.launch_steps_per_s.size() > 1) j["launch_steps_per_s"] = r.launch_steps_per_s;
    if (r.accuracy) {
      const AccuracySummary& a = *r.accuracy;
      auto spread = [](const Spread& v) { return nlohmann::json{{"median", v.median}, {"min", v.min}, {"max", v.max}}; };
      nlohmann::json acc{{"seeds", a.seeds}, {"eval_top1", spread(a.top1)}, {"eval_loss", spread(a.loss)}};
      if (a.target) {
        acc["target"] = {{a.target->metric, a.target->value}};
        acc["reached"] = a.reached;
        acc["steps_to_target"] = a.steps_to_target ? spread(*a.steps_to_target) : nlohmann::json();
        acc["seconds_to_target"] = a.seconds_to_target ? spread(*a.seconds_to_target) : nlohmann::json();
      }
      nlohmann::json curves = nlohmann::json::array();
      for (const std::vector<EvalPoint>& seed : a.curves) {
        nlohmann::json c = nlohmann::json::array();
        for (const EvalPoint& p : seed)
          c.push_back({{"after_step", p.after_step}, {"top1", p.top1}, {"loss", p.loss}, {"train_seconds", p.train_seconds}});
        curves.push_back(c);
      }
      acc["curves"] = curves;
      j["accuracy"] = acc;
    }
    return j;
  };
  nlohmann::json out_rows = nlohmann::json::array();
  for (const TableRow& t : rows) {
    nlohmann::json j = row_json(t.row);
    const bool ok = t.row.failure.empty();
    j["speedup"] = ok ? number(t.speedup) : nlohmann::json();
    j["scaling_efficiency"] = ok ? number(t.scaling_efficiency) : nlohmann::json();
    if (!t.accuracy_verdict.empty()) j["accuracy_verdict"] = t.accuracy_verdict;
    out_rows.push_back(j);
  }
  return {{"baseline", row_json(baseline)}, {"rows", out_rows}};
}

std::string table_document(const std::string& title, const std::vector<TableRow>& rows, const TableHeader& header) {
  std::string md = "# " + title + "\n\n";
  for (const auto& [key, value] : header) md += "- " + key + ": " + value + "\n";
  if (!header.empty()) md += "\n";
  return md + table_markdown(rows);
}

std::vector<std::string> write_table_files(const std::string& stem, const std::string& title,
                                           const std::vector<TableRow>& rows, const BenchRow& baseline,
                                           const TableHeader& header) {
  std::vector<std::string> paths = {stem + ".md", stem + ".csv", stem + ".json", stem + ".svg"};
  write_file(paths[0], table_document(title, rows, header));
  write_file(paths[1], table_csv(rows));
  nlohmann::json json = table_json(rows, baseline);
  if (!header.empty()) {
    json["header"] = nlohmann::json::object();
    for (const auto& [key, value] : header) json["header"][key] = value;
  }
  write_file(paths[2], json.dump(2) + "\n");
  write_file(paths[3], throughput_chart_svg(title, rows));
  if (any_accuracy(rows)) {
    paths.push_back(stem + ".accuracy.svg");
    write_file(paths.back(), accuracy_chart_svg(title, rows));
  }
  return paths;
}

}  // namespace vitddp::bench
