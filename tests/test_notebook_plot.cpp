// tests/test_notebook_plot.cpp — the notebook's loss-curve plots: SVG paths, thinning of long
// series, gaps, log scale, legends, errors
#include "jit/notebook/plot_svg.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>

using namespace sinter::notebook;

namespace {
/// The points of each <path d="..."> in the SVG, as (x, y) pairs, one list per path. Read by
/// hand: std::regex recurses once per character, and a long path overflows the stack under
/// AddressSanitizer.
std::vector<std::vector<std::pair<double, double>>> paths(const std::string& svg) {
  std::vector<std::vector<std::pair<double, double>>> out;
  const std::string open = "<path d=\"";
  for (std::size_t at = svg.find(open); at != std::string::npos; at = svg.find(open, at + 1)) {
    std::size_t begin = at + open.size(), end = svg.find('"', begin);
    REQUIRE(end != std::string::npos);
    std::istringstream d(svg.substr(begin, end - begin));
    std::vector<std::pair<double, double>> points;
    for (char command; d >> command;) {
      REQUIRE((command == 'M' || command == 'L'));
      double x = 0, y = 0;
      REQUIRE(static_cast<bool>(d >> x >> y));
      points.emplace_back(x, y);
    }
    out.push_back(points);
  }
  return out;
}
std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}
} // namespace

TEST_CASE("a loss curve is an SVG path through every point", "[notebook]") {
  std::vector<double> losses;
  for (int i = 0; i < 100; ++i)
    losses.push_back(2.0 * std::exp(-i / 30.0));
  std::string svg = line_plot_svg(plot(losses, "training loss"));
  CHECK(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK(svg.find(">training loss</text>") != std::string::npos);
  auto lines = paths(svg);
  REQUIRE(lines.size() == 1);
  REQUIRE(lines[0].size() == 100);
  // Decreasing loss: y grows downwards in SVG, so each point is lower (larger y) than the last.
  for (std::size_t i = 1; i < lines[0].size(); ++i)
    CHECK(lines[0][i].second >= lines[0][i - 1].second);
  CHECK(lines[0].front().first < lines[0].back().first);
}

TEST_CASE("a long series is thinned per pixel column and keeps its spikes", "[notebook]") {
  std::vector<double> values(100000, 1.0);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] += 0.01 * static_cast<double>(i % 7);
  values[54321] = 10.0; // one spike
  LinePlot p = plot(values);
  auto lines = paths(line_plot_svg(p));
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].size() <= 2 * static_cast<std::size_t>(p.width));
  CHECK(lines[0].size() > static_cast<std::size_t>(p.width));
  double highest = 1e9; // the smallest y: the top of the drawing
  for (auto [x, y] : lines[0])
    highest = std::min(highest, y);
  CHECK(highest < 50); // the spike reaches the top of the plot area (which starts at y = 34)
}

TEST_CASE("non-finite values leave gaps; log scale; legends; errors", "[notebook]") {
  std::string gap = line_plot_svg(plot({1, 2, std::nan(""), 3, 4}));
  CHECK(count(gap, " M") + count(gap, "d=\"M") == 2);
  LinePlot two = plot({1, 2, 3}, "loss");
  two.names[0] = "train";
  two.line("eval", {1.5, 2.5, 3.5});
  std::string legend = line_plot_svg(two);
  CHECK(paths(legend).size() == 2);
  CHECK(legend.find(">train</text>") != std::string::npos);
  CHECK(legend.find(">eval</text>") != std::string::npos);
  LinePlot log = plot({100, 10, 1, 0.1});
  log.log_y = true;
  auto log_lines = paths(line_plot_svg(log));
  // Equal ratios are equal steps on a log scale.
  REQUIRE(log_lines[0].size() == 4);
  double step1 = log_lines[0][1].second - log_lines[0][0].second;
  double step2 = log_lines[0][3].second - log_lines[0][2].second;
  CHECK(step1 == Approx(step2).epsilon(0.01));
  LinePlot bad_log = plot({0, -1});
  bad_log.log_y = true;
  CHECK_THROWS_WITH(line_plot_svg(bad_log), Catch::Contains("positive"));
  CHECK_THROWS_WITH(line_plot_svg(LinePlot{}), Catch::Contains("no series"));
  CHECK(line_plot_text(plot({3, 1, 2}, "loss")) ==
        "loss:\n  loss: 3 points, first 3, last 2, lowest 1");
}
