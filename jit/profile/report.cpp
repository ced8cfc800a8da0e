// jit/profile/report.cpp — the report page: inline SVG charts from a profile's Summary
#include "jit/profile/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <utility>
#include <vector>

namespace sinter::profile {
namespace {

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text)
    switch (c) {
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '&': out += "&amp;"; break;
    case '"': out += "&quot;"; break;
    default: out += c;
    }
  return out;
}

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

const char* const palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                               "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

/// Horizontal bars: one row per (label, value), the value printed with `unit`.
std::string bars(const std::vector<std::pair<std::string, double>>& rows, const std::string& unit,
                 double scale, const char* value_format) {
  const int row_height = 22, label_width = 470, bar_width = 330;
  // Long names keep their end (the kind, op and program), which tells kernels apart.
  auto shown = [](const std::string& label) {
    return label.size() <= 64 ? label : "…" + label.substr(label.size() - 63);
  };
  double largest = 0;
  for (const auto& row : rows)
    largest = std::max(largest, row.second);
  std::string out = "<svg width=\"" + std::to_string(label_width + bar_width + 120) +
                    "\" height=\"" + std::to_string(row_height * rows.size() + 4) +
                    "\" role=\"img\">";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const int y = static_cast<int>(i) * row_height;
    const double width = largest > 0 ? rows[i].second / largest * bar_width : 0;
    out += "<text x=\"" + std::to_string(label_width - 6) + "\" y=\"" + std::to_string(y + 15) +
           "\" text-anchor=\"end\">" + escape(shown(rows[i].first)) + "</text>";
    out += "<rect x=\"" + std::to_string(label_width) + "\" y=\"" + std::to_string(y + 3) +
           "\" width=\"" + format("%.1f", width) + "\" height=\"16\" fill=\"" +
           palette[i % std::size(palette)] + "\"><title>" + escape(rows[i].first) +
           "</title></rect>";
    out += "<text x=\"" + format("%.1f", label_width + width + 6) + "\" y=\"" +
           std::to_string(y + 15) + "\">" + format(value_format, rows[i].second * scale) + " " +
           unit + "</text>";
  }
  return out + "</svg>";
}

/// The roofline: achieved FLOP/s against arithmetic intensity, both on log scales, under the
/// roofs of the measured bandwidth and FLOP rate.
std::string roofline(const Summary& s) {
  const double width = 640, height = 360, left = 70, bottom = 40, top = 10, right = 20;
  const double bw = s.peak.bytes_per_second, flops = s.peak.flops_per_second;
  if (!(bw > 0) || !(flops > 0)) return "<p>No device peak was measured.</p>";
  const double x_min = 1e-2, x_max = 1e3;
  const double y_max = std::pow(10.0, std::ceil(std::log10(flops * 1.5)));
  const double y_min = y_max / 1e6;
  auto px = [&](double intensity) {
    double t =
        (std::log10(intensity) - std::log10(x_min)) / (std::log10(x_max) - std::log10(x_min));
    return left + std::clamp(t, 0.0, 1.0) * (width - left - right);
  };
  auto py = [&](double rate) {
    double t = (std::log10(std::max(rate, y_min)) - std::log10(y_min)) /
               (std::log10(y_max) - std::log10(y_min));
    return height - bottom - std::clamp(t, 0.0, 1.0) * (height - bottom - top);
  };
  std::string out = "<svg width=\"" + format("%.0f", width) + "\" height=\"" +
                    format("%.0f", height) + "\" role=\"img\">";
  out += "<rect x=\"" + format("%.0f", left) + "\" y=\"" + format("%.0f", top) + "\" width=\"" +
         format("%.0f", width - left - right) + "\" height=\"" +
         format("%.0f", height - top - bottom) + "\" fill=\"#fafafa\" stroke=\"#ccc\"/>";
  // Decade grid and labels.
  for (double x = x_min; x <= x_max * 1.001; x *= 10)
    out += "<text x=\"" + format("%.1f", px(x)) + "\" y=\"" + format("%.0f", height - bottom + 16) +
           "\" text-anchor=\"middle\" class=\"axis\">" + format("%g", x) + "</text>";
  for (double y = y_min; y <= y_max * 1.001; y *= 10)
    out += "<text x=\"" + format("%.0f", left - 6) + "\" y=\"" + format("%.1f", py(y) + 4) +
           "\" text-anchor=\"end\" class=\"axis\">" + format("%g", y * 1e-9) + "</text>";
  out += "<text x=\"" + format("%.0f", (left + width) / 2) + "\" y=\"" +
         format("%.0f", height - 6) +
         "\" text-anchor=\"middle\">arithmetic intensity (FLOP per byte)</text>";
  out += "<text x=\"14\" y=\"" + format("%.0f", height / 2) + "\" transform=\"rotate(-90 14 " +
         format("%.0f", height / 2) + ")\" text-anchor=\"middle\">GFLOP/s</text>";
  // The roof: bandwidth × intensity up to the ridge, then the FLOP rate.
  std::string roof;
  for (int i = 0; i <= 60; ++i) {
    double x = x_min * std::pow(x_max / x_min, i / 60.0);
    roof += format(i ? " %.1f" : "%.1f", px(x)) + "," + format("%.1f", py(std::min(flops, bw * x)));
  }
  out += "<polyline points=\"" + roof + "\" fill=\"none\" stroke=\"#333\" stroke-width=\"2\"/>";
  for (std::size_t i = 0; i < s.kernels.size() && i < 60; ++i) {
    const KernelRow& k = s.kernels[i];
    if (k.info.bytes <= 0 || k.info.flops <= 0 || k.calls == 0 || k.seconds <= 0) continue;
    double intensity = static_cast<double>(k.info.flops) / static_cast<double>(k.info.bytes);
    double rate = static_cast<double>(k.info.flops) * static_cast<double>(k.calls) / k.seconds;
    double radius = 3 + 9 * std::sqrt(k.share);
    out += "<circle cx=\"" + format("%.1f", px(intensity)) + "\" cy=\"" + format("%.1f", py(rate)) +
           "\" r=\"" + format("%.1f", radius) + "\" fill=\"" +
           palette[static_cast<std::size_t>(k.info.role) % std::size(palette)] +
           "\" fill-opacity=\"0.7\"><title>" + escape(k.info.name) + ": " +
           format("%.1f", k.share * 100) + "% of kernel time, " + format("%.2f", rate * 1e-9) +
           " GFLOP/s, " + format("%.0f", k.achieved * 100) + "% of peak</title></circle>";
  }
  return out + "</svg>";
}

} // namespace

std::string report_html(const Summary& s) {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>sinter profile</title><style>"
      "body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}"
      "h1{font-size:22px}h2{font-size:17px;margin-top:28px}"
      "svg text{font-size:12px;font-family:monospace}svg text.axis{fill:#666}"
      "table{border-collapse:collapse;font-size:13px}"
      "td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}"
      "td:first-child,th:first-child{text-align:left}"
      ".verdict{background:#fff4e5;border-left:4px solid #f28e2b;padding:6px 10px;margin:6px 0}"
      ".fine{background:#eef7ee;border-left:4px solid #59a14f;padding:6px 10px}"
      "</style></head><body>\n";
  out += "<h1>sinter profile</h1>\n<p>" + std::to_string(s.steps) + " steps counted (" +
         std::to_string(s.skipped) + " left out: warm-up or compiles), " +
         format("%.2f", s.phases.step * 1e3) + " ms per step, " + std::to_string(s.compiles) +
         " compiles. Device peak: " + format("%.1f", s.peak.bytes_per_second * 1e-9) + " GB/s, " +
         format("%.1f", s.peak.flops_per_second * 1e-9) + " GFLOP/s (" + escape(s.peak.how) +
         ").</p>\n<h2>Verdicts</h2>\n";
  if (s.verdicts.empty())
    out += "<div class=\"fine\">balanced — no phase or kernel stands out</div>\n";
  for (const Verdict& v : s.verdicts)
    out += "<div class=\"verdict\">" + escape(v.line) + "</div>\n";

  std::vector<std::pair<std::string, double>> phases;
  for (const auto& [name, seconds] : s.phases.parts())
    phases.emplace_back(name, seconds);
  out += "<h2>Time by phase (mean per step)</h2>\n" + bars(phases, "ms", 1e3, "%.3f") + "\n";

  std::vector<std::pair<std::string, double>> top;
  for (std::size_t i = 0; i < s.kernels.size() && i < 15; ++i)
    top.emplace_back(s.kernels[i].info.name + " (" + role_name(s.kernels[i].info.role) + ", " +
                         s.kernels[i].program + ")",
                     s.kernels[i].share);
  out += "<h2>Top kernels (share of kernel time)</h2>\n" + bars(top, "%", 100, "%.1f") + "\n";

  std::vector<std::pair<std::string, double>> modules;
  for (std::size_t i = 0; i < s.modules.size() && i < 15; ++i)
    modules.push_back(s.modules[i]);
  out += "<h2>Time by model path (seconds, all counted calls)</h2>\n" +
         bars(modules, "s", 1, "%.3f") + "\n";

  out += "<h2>Roofline</h2>\n<p>Each kernel at its arithmetic intensity and achieved rate; the "
         "line is the measured bandwidth, then the measured FLOP rate. Colour: role "
         "(forward, backward, optimizer, teacher, collective).</p>\n" +
         roofline(s) + "\n";

  out += "<h2>Kernels</h2>\n<table><tr><th>kernel</th><th>program</th><th>role</th>"
         "<th>calls</th><th>ms/call</th><th>share</th><th>MB</th><th>MFLOP</th>"
         "<th>bound</th><th>of peak</th></tr>\n";
  for (std::size_t i = 0; i < s.kernels.size() && i < 40; ++i) {
    const KernelRow& k = s.kernels[i];
    out += "<tr><td>" + escape(k.info.name) + "</td><td>" + escape(k.program) + "</td><td>" +
           role_name(k.info.role) + "</td><td>" + std::to_string(k.calls) + "</td><td>" +
           format("%.3f", k.seconds / static_cast<double>(k.calls) * 1e3) + "</td><td>" +
           format("%.1f%%", k.share * 100) + "</td><td>" +
           format("%.2f", static_cast<double>(k.info.bytes) * 1e-6) + "</td><td>" +
           format("%.1f", static_cast<double>(k.info.flops) * 1e-6) + "</td><td>" +
           (k.memory_bound ? "memory" : "compute") + "</td><td>" +
           format("%.0f%%", k.achieved * 100) + "</td></tr>\n";
  }
  out += "</table>\n";

  if (!s.cpu_use.empty()) {
    std::vector<std::pair<std::string, double>> cores;
    for (std::size_t c = 0; c < s.cpu_use.size(); ++c)
      cores.emplace_back("cpu" + std::to_string(c), s.cpu_use[c]);
    out +=
        "<h2>CPU use per core (mean while profiling)</h2>\n" + bars(cores, "%", 100, "%.0f") + "\n";
  }
  out += "<p>Open <code>trace.json</code> beside this page in Perfetto (ui.perfetto.dev) or "
         "chrome://tracing for the timeline.</p>\n</body></html>\n";
  return out;
}

} // namespace sinter::profile
