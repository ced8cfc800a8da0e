// jit/cli/plot_command.cpp — `sinter plot DIR`: a --log-dir's metrics.csv drawn as loss and
// accuracy curves (SVG, the notebook's plotter), for people without TensorBoard
#include "jit/cli/plot_command.hpp"

#include "jit/io/atomic_file.hpp"
#include "jit/io/metrics_log.hpp"
#include "jit/notebook/plot_svg.hpp"

#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>

namespace sinter::cli {

int run_plot_command(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: sinter plot DIR   (DIR: a recipe's --log-dir, holding "
                         "metrics.csv; writes DIR/loss.svg and DIR/accuracy.svg)\n");
    return 2;
  }
  const std::filesystem::path dir = argv[2];
  try {
    MetricsTable table = read_metrics_csv(dir / "metrics.csv");
    struct Figure {
      std::string file, title, y_label;
      std::function<bool(const std::string&)> shows;
    };
    const Figure figures[] = {
        {"loss.svg", "loss", "loss", [](const std::string& c) { return c.ends_with("loss"); }},
        {"accuracy.svg", "accuracy", "accuracy",
         [](const std::string& c) { return c.find("accuracy") != std::string::npos; }}};
    int written = 0;
    for (const Figure& figure : figures) {
      notebook::LinePlot plot;
      plot.title = figure.title;
      plot.y_label = figure.y_label;
      for (std::size_t c = 0; c < table.columns.size(); ++c) {
        if (!figure.shows(table.columns[c])) continue;
        std::vector<double> x, y; // the rows that hold this column
        for (std::size_t r = 0; r < table.steps.size(); ++r)
          if (std::isfinite(table.values[r][c])) {
            x.push_back(static_cast<double>(table.steps[r]));
            y.push_back(table.values[r][c]);
          }
        if (!y.empty()) plot.line(table.columns[c], std::move(x), std::move(y));
      }
      if (plot.series.empty()) continue;
      write_file_atomically(dir / figure.file, notebook::line_plot_svg(plot), "plot");
      std::printf("wrote %s\n%s\n", (dir / figure.file).c_str(),
                  notebook::line_plot_text(plot).c_str());
      ++written;
    }
    if (written == 0) {
      std::fprintf(stderr, "sinter: %s has no loss or accuracy column with a value to plot\n",
                   (dir / "metrics.csv").c_str());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

} // namespace sinter::cli
