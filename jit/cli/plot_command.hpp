// jit/cli/plot_command.hpp — `sinter plot DIR`: a run's logged metrics as SVG curves
#pragma once

namespace sinter::cli {

/// `sinter plot DIR`: draws DIR/metrics.csv (a recipe's --log-dir) into DIR/loss.svg (every
/// column ending in `loss`) and DIR/accuracy.svg (every column naming `accuracy`) against the
/// step; prints what it wrote. Exit 0, 1 (nothing to plot, or an unreadable file, named) or 2
/// (usage).
int run_plot_command(int argc, char** argv);

} // namespace sinter::cli
