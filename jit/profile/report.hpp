// jit/profile/report.hpp — DIR/report.html: a profile's summary as a self-contained page
#pragma once
#include "jit/profile/profiler.hpp"

#include <string>

namespace sinter::profile {

/// One HTML page with no script and no external resource: the verdicts, time by phase, the top
/// kernels, time by model path, each kernel on the roofline of the measured peak, CPU use.
std::string report_html(const Summary& summary);

} // namespace sinter::profile
