// jit/notebook/tensor_display.cpp — a HostTensor as notebook text and HTML, elided in the middle
#include "jit/notebook/tensor_display.hpp"
#include "jit/ir/graph.hpp"

#include <cstdio>
#include <vector>

namespace sinter::notebook {
namespace {

/// The tensor as rows × columns (the last dim is the columns; a scalar is one value).
struct Grid {
  int64_t rows = 1, columns = 1;
};

Grid grid_of(const HostTensor& t) {
  const Shape& s = t.shape();
  Grid g;
  if (s.empty()) return g;
  g.columns = s.back();
  for (std::size_t d = 0; d + 1 < s.size(); ++d)
    g.rows *= s[d];
  return g;
}

/// The indices shown along an axis of `n`: all, or the first and last `edge` with -1 (`…`)
/// between.
std::vector<int64_t> shown_indices(int64_t n, int64_t edge) {
  std::vector<int64_t> out;
  if (n <= 2 * edge + 1) {
    for (int64_t i = 0; i < n; ++i)
      out.push_back(i);
    return out;
  }
  for (int64_t i = 0; i < edge; ++i)
    out.push_back(i);
  out.push_back(-1);
  for (int64_t i = n - edge; i < n; ++i)
    out.push_back(i);
  return out;
}

std::string number(const HostTensor& t, int64_t flat) {
  char text[32];
  double v = t.at(flat);
  if (is_integer(t.dtype()) || t.dtype() == DType::boolean)
    std::snprintf(text, sizeof text, "%lld", static_cast<long long>(v));
  else
    std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

std::string heading(const HostTensor& t) { return to_string(TensorType{t.dtype(), t.shape()}); }

} // namespace

std::string tensor_text(const HostTensor& t, int64_t edge) {
  std::string out = heading(t);
  if (t.size() == 0) return out + " (no values)";
  Grid g = grid_of(t);
  for (int64_t r : shown_indices(g.rows, edge)) {
    out += "\n ";
    if (r < 0) {
      out += " …";
      continue;
    }
    for (int64_t c : shown_indices(g.columns, edge))
      out += " " + (c < 0 ? std::string("…") : number(t, r * g.columns + c));
  }
  return out;
}

std::string tensor_html(const HostTensor& t, int64_t edge) {
  std::string out = "<div><code>" + heading(t) + "</code>";
  if (t.size() == 0) return out + " (no values)</div>";
  out += "<table>";
  Grid g = grid_of(t);
  std::vector<int64_t> columns = shown_indices(g.columns, edge);
  for (int64_t r : shown_indices(g.rows, edge)) {
    out += "<tr>";
    for (int64_t c : columns)
      out += "<td style=\"text-align:right\">" +
             (r < 0 || c < 0 ? std::string("…") : number(t, r * g.columns + c)) + "</td>";
    out += "</tr>";
  }
  return out + "</table></div>";
}

} // namespace sinter::notebook
