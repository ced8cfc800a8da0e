// jit/notebook/display.hpp — what notebook cells call to show a value (included before the first
// cell): display(x), and the hook a trailing expression goes through
#pragma once
#include "jit/runtime/host_tensor.hpp"

#include <concepts>
#include <sstream>
#include <string>
#include <typeinfo>

// Defined by sinter-kernel (exported to the cells): hands a shown value to the notebook.
// `as_result`: the cell's trailing expression (an execute_result) rather than display().
extern "C" void sinter_notebook_show_text(const char* text, const char* html, bool as_result);
extern "C" void sinter_notebook_show_tensor(const sinter::HostTensor* tensor, bool as_result);

namespace sinter::notebook {

template <class T>
concept Streamable = requires(std::ostream& out, const T& value) { out << value; };

namespace detail {
template <class T> void show(const T& value, bool as_result) {
  if constexpr (std::same_as<T, HostTensor>) {
    sinter_notebook_show_tensor(&value, as_result);
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
/// an HTML table, anything with `operator<<` as text.
template <class T> void display(const T& value) { detail::show(value, false); }

/// The cell's trailing expression (the kernel wraps it in this call): shown as the cell's
/// result.
template <class T> void show_result(const T& value) { detail::show(value, true); }

} // namespace sinter::notebook
