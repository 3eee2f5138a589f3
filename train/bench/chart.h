// The sweep's bar chart: images/s per configuration as horizontal bars (SVG, no dependencies),
// coloured by GPU count, each with its value and speedup, and a dashed mark where linear scaling
// from the baseline would put it. Axis, gridlines and fonts sized to be read, not squinted at.
#pragma once

#include <string>
#include <vector>

#include "train/bench/table.h"

namespace vitddp::bench {

// A standalone SVG document; one <rect class="bar"> per row, in row order.
std::string throughput_chart_svg(const std::string& title, const std::vector<TableRow>& rows);

// Throughput against accuracy, for rows with accuracy (Note [Accuracy beside speed]): left, one
// mark per configuration at (images/s, median eval top-1) with its range over seeds as a bar and
// the mark hollow where a seed missed the target (the target a dashed line); then each
// configuration's eval top-1 and eval loss against steps, one line per seed. One <circle
// class="mark"> per row with accuracy, in row order, and one <polyline class="loss"> per seed.
std::string accuracy_chart_svg(const std::string& title, const std::vector<TableRow>& rows);

// The axis end and tick step for values up to `max_value`: a 1-2-5 step giving at most
// `max_ticks` intervals. Exposed for tests.
struct AxisScale {
  double max = 1;
  double step = 1;
};
AxisScale nice_axis(double max_value, int max_ticks = 6);

}  // namespace vitddp::bench
