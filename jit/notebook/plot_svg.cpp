// jit/notebook/plot_svg.cpp — line plots as SVG: scales with round ticks, a log option, per-pixel
// min/max thinning of long series, a legend
#include "jit/notebook/plot_svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace sinter::notebook {
namespace {

constexpr const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", v);
  return buffer;
}

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

/// Round tick positions covering [low, high]: steps of 1, 2 or 5 times a power of ten, about
/// `count` of them.
std::vector<double> round_ticks(double low, double high, int count) {
  double span = high - low;
  if (!(span > 0)) return {low};
  double raw = span / count;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * power) {
      step = m * power;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(low / step) * step; t <= high + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

} // namespace

std::string line_plot_svg(const LinePlot& plot) {
  if (plot.series.empty())
    throw std::invalid_argument("sinter: the plot has no series — add one with plot(values) or "
                                ".line(name, values)");
  const double left = 64, right = 16, top = plot.title.empty() ? 16 : 34, bottom = 44;
  const double width = std::max(plot.width, 200), height = std::max(plot.height, 120);
  const double inner_w = width - left - right, inner_h = height - top - bottom;
  auto y_of = [&](double v) { return plot.log_y ? std::log10(v) : v; };

  double x_low = std::numeric_limits<double>::infinity(), x_high = -x_low;
  double y_low = std::numeric_limits<double>::infinity(), y_high = -y_low;
  for (std::size_t k = 0; k < plot.series.size(); ++k) {
    const std::vector<double>& s = plot.series[k];
    for (std::size_t i = 0; i < s.size(); ++i) {
      x_low = std::min(x_low, plot.x_at(k, i));
      x_high = std::max(x_high, plot.x_at(k, i));
    }
    for (double v : s)
      if (std::isfinite(v) && (!plot.log_y || v > 0)) {
        y_low = std::min(y_low, y_of(v));
        y_high = std::max(y_high, y_of(v));
      }
  }
  if (!std::isfinite(y_low))
    throw std::invalid_argument(plot.log_y ? "sinter: a log-scale plot needs a positive value"
                                           : "sinter: the plot has no finite value to draw");
  if (y_high == y_low) { // a flat line: give it some room
    double pad = y_low == 0 ? 1 : std::abs(y_low) * 0.1;
    y_low -= pad;
    y_high += pad;
  }
  if (!std::isfinite(x_low)) x_low = x_high = plot.x_start;
  if (x_high == x_low) x_high = x_low + 1;
  double y_pad = (y_high - y_low) * 0.04;
  y_low -= y_pad;
  y_high += y_pad;
  auto px = [&](double x) { return left + (x - x_low) / (x_high - x_low) * inner_w; };
  auto py = [&](double y) { return top + (1 - (y - y_low) / (y_high - y_low)) * inner_h; };

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(width) +
                    "\" height=\"" + number(height) + "\" viewBox=\"0 0 " + number(width) + " " +
                    number(height) +
                    "\" font-family=\"sans-serif\" font-size=\"11\">\n"
                    "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!plot.title.empty())
    svg += "<text x=\"" + number(width / 2) +
           "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">" + escaped(plot.title) +
           "</text>\n";
  // Grid and ticks.
  for (double t : round_ticks(y_low, y_high, 5)) {
    double y = py(t);
    svg += "<line x1=\"" + number(left) + "\" y1=\"" + number(y) + "\" x2=\"" +
           number(left + inner_w) + "\" y2=\"" + number(y) + "\" stroke=\"#e6e6e6\"/>\n";
    svg += "<text x=\"" + number(left - 6) + "\" y=\"" + number(y + 4) + "\" text-anchor=\"end\">" +
           number(plot.log_y ? std::pow(10.0, t) : t) + "</text>\n";
  }
  for (double t : round_ticks(x_low, x_high, 6)) {
    double x = px(t);
    svg += "<line x1=\"" + number(x) + "\" y1=\"" + number(top) + "\" x2=\"" + number(x) +
           "\" y2=\"" + number(top + inner_h) + "\" stroke=\"#f0f0f0\"/>\n";
    svg += "<text x=\"" + number(x) + "\" y=\"" + number(top + inner_h + 15) +
           "\" text-anchor=\"middle\">" + number(t) + "</text>\n";
  }
  svg += "<rect x=\"" + number(left) + "\" y=\"" + number(top) + "\" width=\"" + number(inner_w) +
         "\" height=\"" + number(inner_h) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  svg += "<text x=\"" + number(left + inner_w / 2) + "\" y=\"" + number(height - 8) +
         "\" text-anchor=\"middle\">" + escaped(plot.x_label) + "</text>\n";
  svg += "<text transform=\"translate(14 " + number(top + inner_h / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escaped(plot.y_label) +
         (plot.log_y ? " (log)" : "") + "</text>\n";

  // The lines. More points than pixel columns: each column keeps its first, lowest, highest
  // and last value, in order.
  for (std::size_t s = 0; s < plot.series.size(); ++s) {
    const std::vector<double>& values = plot.series[s];
    std::string colour = palette[s % std::size(palette)];
    std::string path;
    bool pen_down = false;
    auto point = [&](double x, double v) {
      path += (pen_down ? " L" : " M") + number(px(x)) + " " + number(py(y_of(v)));
      pen_down = true;
    };
    std::size_t columns = static_cast<std::size_t>(inner_w);
    if (values.size() <= 2 * columns) {
      for (std::size_t i = 0; i < values.size(); ++i) {
        double v = values[i];
        if (!std::isfinite(v) || (plot.log_y && v <= 0)) {
          pen_down = false;
          continue;
        }
        point(plot.x_at(s, i), v);
      }
    } else {
      for (std::size_t c = 0; c < columns; ++c) {
        std::size_t from = values.size() * c / columns, to = values.size() * (c + 1) / columns;
        std::size_t low = to, high = to;
        for (std::size_t i = from; i < to; ++i) {
          double v = values[i];
          if (!std::isfinite(v) || (plot.log_y && v <= 0)) continue;
          if (low == to || v < values[low]) low = i;
          if (high == to || v > values[high]) high = i;
        }
        if (low == to) {
          pen_down = false;
          continue;
        }
        for (std::size_t i : {std::min(low, high), std::max(low, high)})
          point(plot.x_at(s, i), values[i]);
      }
    }
    if (!path.empty())
      svg += "<path d=\"" + path.substr(1) + "\" fill=\"none\" stroke=\"" + colour +
             "\" stroke-width=\"1.5\"/>\n";
  }
  // Legend, top right, when there is more than one line.
  if (plot.series.size() > 1)
    for (std::size_t s = 0; s < plot.series.size(); ++s) {
      double y = top + 14 + 16 * static_cast<double>(s);
      double x = left + inner_w - 120;
      std::string colour = palette[s % std::size(palette)];
      svg += "<line x1=\"" + number(x) + "\" y1=\"" + number(y - 4) + "\" x2=\"" + number(x + 18) +
             "\" y2=\"" + number(y - 4) + "\" stroke=\"" + colour + "\" stroke-width=\"2\"/>\n";
      svg += "<text x=\"" + number(x + 24) + "\" y=\"" + number(y) + "\">" +
             escaped(s < plot.names.size() ? plot.names[s] : "") + "</text>\n";
    }
  svg += "</svg>\n";
  return svg;
}

std::string line_plot_text(const LinePlot& plot) {
  std::string text = plot.title.empty() ? "plot" : plot.title;
  text += ":";
  for (std::size_t s = 0; s < plot.series.size(); ++s) {
    const std::vector<double>& v = plot.series[s];
    double lowest = std::numeric_limits<double>::infinity();
    for (double x : v)
      if (std::isfinite(x)) lowest = std::min(lowest, x);
    text += "\n  " + (s < plot.names.size() ? plot.names[s] : std::string("series")) + ": " +
            std::to_string(v.size()) + " points";
    if (!v.empty())
      text += ", first " + number(v.front()) + ", last " + number(v.back()) + ", lowest " +
              number(lowest);
  }
  return text;
}

} // namespace sinter::notebook
