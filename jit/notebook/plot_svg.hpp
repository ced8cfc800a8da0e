// jit/notebook/plot_svg.hpp — a LinePlot (a loss curve) drawn as an SVG image with axes, ticks
// and a legend, and summarised as text
#pragma once
#include "jit/notebook/display.hpp"

#include <string>

namespace sinter::notebook {

/// The plot as a standalone SVG document (`image/svg+xml`). Series longer than the plot is
/// wide in pixels keep each pixel column's lowest and highest value, so spikes stay visible.
/// Non-finite values are left out (a gap in the line). Throws std::invalid_argument when
/// there is nothing to draw, or a log scale has no positive value.
std::string line_plot_svg(const LinePlot& plot);

/// One line per series: its name, its length, its first, last and lowest value.
std::string line_plot_text(const LinePlot& plot);

} // namespace sinter::notebook
