// jit/notebook/display.hpp — what notebook cells call to show things (included before the first
// cell): display(x), loss-curve plots, progress bars, and the hook a trailing expression goes
// through
#pragma once
#include "jit/runtime/host_tensor.hpp"

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

namespace sinter::notebook {

/// Lines over steps (a loss curve, train against eval): shown as an SVG image. x runs
/// `x_start`, `x_start + x_step`, … along each series.
struct LinePlot {
  std::string title, x_label = "step", y_label = "loss";
  std::vector<std::string> names;
  std::vector<std::vector<double>> series;
  double x_start = 0, x_step = 1;
  /// Where given (same length as its series), the x of each point of series i instead of
  /// x_start + i·x_step: metrics logged at uneven steps.
  std::vector<std::vector<double>> xs;
  bool log_y = false;
  int width = 640, height = 320; // pixels

  /// Adds a series (its name goes in the legend).
  LinePlot& line(std::string name, std::vector<double> values) {
    names.push_back(std::move(name));
    series.push_back(std::move(values));
    return *this;
  }
  /// Adds a series with the x of each point.
  LinePlot& line(std::string name, std::vector<double> x, std::vector<double> values) {
    xs.resize(series.size());
    xs.push_back(std::move(x));
    return line(std::move(name), std::move(values));
  }
  /// The x of point `i` of series `s`.
  double x_at(std::size_t s, std::size_t i) const {
    return s < xs.size() && xs[s].size() == series[s].size()
               ? xs[s][i]
               : x_start + x_step * static_cast<double>(i);
  }
};

/// A loss curve: `plot(losses)` as a cell's last line shows it.
inline LinePlot plot(std::vector<double> values, std::string title = "loss") {
  LinePlot out;
  out.title = std::move(title);
  out.line(out.title, std::move(values));
  return out;
}

} // namespace sinter::notebook

// Defined by sinter-kernel (exported to the cells): hands a shown value to the notebook.
// `as_result`: the cell's trailing expression (an execute_result) rather than display().
extern "C" void sinter_notebook_show_text(const char* text, const char* html, bool as_result);
extern "C" void sinter_notebook_show_tensor(const sinter::HostTensor* tensor, bool as_result);
extern "C" void sinter_notebook_show_plot(const sinter::notebook::LinePlot* plot, bool as_result);
/// Shows (`id` < 0: returns a new id) or replaces in place (`id` ≥ 0) a display.
extern "C" int sinter_notebook_show_in_place(int id, const char* text, const char* html);

namespace sinter::notebook {

template <class T>
concept Streamable = requires(std::ostream& out, const T& value) { out << value; };

namespace detail {
template <class T> void show(const T& value, bool as_result) {
  if constexpr (std::same_as<T, HostTensor>) {
    sinter_notebook_show_tensor(&value, as_result);
  } else if constexpr (std::same_as<T, LinePlot>) {
    sinter_notebook_show_plot(&value, as_result);
  } else if constexpr (std::same_as<T, bool>) {
    sinter_notebook_show_text(value ? "true" : "false", "", as_result);
  } else if constexpr (Streamable<T>) {
    std::ostringstream text;
    text.precision(17);
    text << value;
    sinter_notebook_show_text(text.str().c_str(), "", as_result);
  } else {
    std::string text = std::string("(") + typeid(T).name() + ")";
    sinter_notebook_show_text(text.c_str(), "", as_result);
  }
}
} // namespace detail

/// Shows `value` in the notebook now, below the cell's output so far: a HostTensor as text and
/// an HTML table, a LinePlot as an image, anything with `operator<<` as text.
template <class T> void display(const T& value) { detail::show(value, false); }

/// The cell's trailing expression (the kernel wraps it in this call): shown as the cell's
/// result.
template <class T> void show_result(const T& value) { detail::show(value, true); }

/// A progress bar that updates in place while a loop runs:
///
///     ProgressBar bar(steps, "training");
///     for (int s = 1; s <= steps; ++s) bar.update(s, step(x, y).loss.value());
///
/// It redraws at most 10 times a second, and always at the last step. It shows the steps
/// done, the rate, the time left and the last loss given.
class ProgressBar {
public:
  explicit ProgressBar(int64_t total, std::string label = "training")
      : total_(total), label_(std::move(label)), start_(clock::now()) {
    if (total_ < 1) total_ = 1;
    draw(0, std::numeric_limits<double>::quiet_NaN());
  }
  /// `done` steps of `total` are done; `loss`, when given, is shown beside.
  void update(int64_t done, double loss = std::numeric_limits<double>::quiet_NaN()) {
    auto now = clock::now();
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    draw(done, loss);
  }

private:
  using clock = std::chrono::steady_clock;
  void draw(int64_t done, double loss) {
    last_draw_ = clock::now();
    double seconds = std::chrono::duration<double>(last_draw_ - start_).count();
    double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
    double percent =
        100.0 * static_cast<double>(std::min(done, total_)) / static_cast<double>(total_);
    std::ostringstream text;
    text.setf(std::ios::fixed);
    text.precision(1);
    text << label_ << " " << done << "/" << total_ << " (" << percent << "%)";
    if (done > 0) {
      text << ", " << rate << " steps/s";
      if (done < total_ && rate > 0)
        text << ", " << static_cast<double>(total_ - done) / rate << " s left";
      else if (done >= total_)
        text << ", " << seconds << " s";
    }
    if (loss == loss) {
      text.precision(4);
      text << ", loss " << loss;
    }
    std::string line = text.str();
    std::ostringstream html;
    html << "<div><progress value=\"" << std::min(done, total_) << "\" max=\"" << total_
         << "\" style=\"width:40%\"></progress> <code>" << line << "</code></div>";
    id_ = sinter_notebook_show_in_place(id_, line.c_str(), html.str().c_str());
  }
  int64_t total_;
  std::string label_;
  clock::time_point start_, last_draw_{};
  int id_ = -1;
};

} // namespace sinter::notebook
