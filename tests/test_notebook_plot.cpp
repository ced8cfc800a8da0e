// tests/test_notebook_plot.cpp — the notebook's loss-curve plots: SVG paths, thinning of long
// series, gaps, log scale, legends, errors
#include "jit/notebook/plot_svg.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <regex>
#include <string>

using namespace sinter::notebook;

namespace {
/// The points of each <path d="..."> in the SVG, as (x, y) pairs, one list per path.
std::vector<std::vector<std::pair<double, double>>> paths(const std::string& svg) {
  std::vector<std::vector<std::pair<double, double>>> out;
  std::regex path_re("<path d=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), path_re);
       it != std::sregex_iterator(); ++it) {
    std::string d = (*it)[1];
    std::regex point_re("[ML]([-0-9.e]+) ([-0-9.e]+)");
    std::vector<std::pair<double, double>> points;
    for (auto p = std::sregex_iterator(d.begin(), d.end(), point_re); p != std::sregex_iterator();
         ++p)
      points.emplace_back(std::stod((*p)[1]), std::stod((*p)[2]));
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
