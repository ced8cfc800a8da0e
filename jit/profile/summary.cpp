// jit/profile/summary.cpp — a finished profile: phases per step, kernels by model path and role,
// verdicts with actions, the summary text and the Perfetto trace
#include "jit/profile/recorder.hpp"

namespace sinter::profile {
namespace detail {
namespace {

std::string percent(double share) {
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%", share * 100);
  return text;
}

} // namespace

Summary Profiler::finish() {
  stop_sampler();
  std::lock_guard lock(mutex_);
  Summary s;
  s.dir = dir_;
  s.peak = peak_;
  s.loader_threads = loader_threads_;
  s.compiles = static_cast<int64_t>(compiles_.size());

  // Phases: the mean over counted steps (past the warm-up, no compile inside).
  PhaseTimes& ph = s.phases;
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    const StepRecord& r = steps_[i];
    if (static_cast<int64_t>(i) < options_.skip_steps || r.compiled) {
      ++s.skipped;
      continue;
    }
    ++s.steps;
    auto sec = [](int64_t ns) { return static_cast<double>(ns) * 1e-9; };
    ph.data += sec(r.data);
    ph.copies += sec(r.copies);
    ph.forward += sec(r.role[static_cast<std::size_t>(Role::forward)]);
    ph.teacher += sec(r.role[static_cast<std::size_t>(Role::teacher)]);
    ph.backward += sec(r.role[static_cast<std::size_t>(Role::backward)]);
    ph.optimizer += sec(r.role[static_cast<std::size_t>(Role::optimizer)]);
    ph.collectives += sec(r.role[static_cast<std::size_t>(Role::collective)]);
    ph.other_programs += sec(r.other);
    ph.step += sec(r.end - r.period_begin);
    s.device_reads += static_cast<double>(r.reads);
    s.device_read_seconds += sec(r.read_ns);
  }
  if (s.steps > 0) {
    auto n = static_cast<double>(s.steps);
    for (double* v : {&ph.data, &ph.copies, &ph.forward, &ph.teacher, &ph.backward, &ph.optimizer,
                      &ph.collectives, &ph.other_programs, &ph.step})
      *v /= n;
    s.device_reads /= n;
    s.device_read_seconds /= n;
    ph.host = std::max(0.0, ph.step - ph.data - ph.copies - ph.forward - ph.teacher - ph.backward -
                                ph.optimizer - ph.collectives - ph.other_programs);
  }

  // A GEMM of the program that ran faster than the probe proves the device can: the probe
  // shared the cores (a loader filling its queue at the start, say). The peak is then raised to
  // that GEMM's mean rate, so no share exceeds 100%.
  double fastest_gemm = 0;
  for (const auto& [id, p] : programs_)
    for (std::size_t k = 0; k < p.kernels.size(); ++k)
      if (p.calls[k] > 0 && p.kernels[k].gemm && p.total_ns[k] > 0)
        fastest_gemm = std::max(fastest_gemm, static_cast<double>(p.kernels[k].flops) *
                                                  static_cast<double>(p.calls[k]) /
                                                  (static_cast<double>(p.total_ns[k]) * 1e-9));
  if (fastest_gemm > s.peak.flops_per_second) {
    char raised[160];
    std::snprintf(raised, sizeof raised,
                  "; FLOP/s raised from the probe's %.1f to the fastest GEMM's %.1f GFLOP/s",
                  s.peak.flops_per_second * 1e-9, fastest_gemm * 1e-9);
    s.peak.how += raised;
    s.peak.flops_per_second = fastest_gemm;
  }

  // Kernels, with their place on the roofline.
  double kernel_total = 0, gemm_total = 0;
  int64_t gemm_kernels = 0;
  double gemm_flops = 0;
  std::map<std::string, double> by_module;
  for (const auto& [id, p] : programs_)
    for (std::size_t k = 0; k < p.kernels.size(); ++k) {
      if (p.calls[k] == 0) continue;
      KernelRow row;
      row.info = p.kernels[k];
      row.program = p.label;
      row.calls = p.calls[k];
      row.seconds = static_cast<double>(p.total_ns[k]) * 1e-9;
      const double per_call = row.seconds / static_cast<double>(row.calls);
      const double intensity = row.info.bytes > 0 ? static_cast<double>(row.info.flops) /
                                                        static_cast<double>(row.info.bytes)
                                                  : 1e30;
      const double bandwidth = s.peak.bandwidth_for(row.info.bytes);
      row.memory_bound = intensity < s.peak.flops_per_second / bandwidth;
      if (per_call > 0)
        row.achieved = row.memory_bound ? static_cast<double>(row.info.bytes) / per_call / bandwidth
                                        : static_cast<double>(row.info.flops) / per_call /
                                              s.peak.flops_per_second;
      kernel_total += row.seconds;
      if (row.info.gemm) {
        gemm_total += row.seconds;
        ++gemm_kernels;
        gemm_flops += static_cast<double>(row.info.flops) * static_cast<double>(row.calls);
      }
      by_module[row.info.path.empty() ? "(top level)" : row.info.path] += row.seconds;
      s.kernels.push_back(std::move(row));
    }
  for (KernelRow& row : s.kernels)
    row.share = kernel_total > 0 ? row.seconds / kernel_total : 0;
  std::sort(s.kernels.begin(), s.kernels.end(),
            [](const KernelRow& a, const KernelRow& b) { return a.seconds > b.seconds; });
  s.modules.assign(by_module.begin(), by_module.end());
  std::sort(s.modules.begin(), s.modules.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });

  // Per-core CPU use.
  for (const auto& [ts, busy] : cpu_samples_) {
    if (s.cpu_use.size() < busy.size()) s.cpu_use.resize(busy.size(), 0.0);
    for (std::size_t c = 0; c < busy.size(); ++c)
      s.cpu_use[c] += busy[c] / static_cast<double>(cpu_samples_.size());
  }

  // Verdicts, each with the number it rests on and what to do.
  auto say = [&](std::string kind, double value, std::string line) {
    s.verdicts.push_back({std::move(kind), value, std::move(line)});
  };
  if (s.steps > 0 && ph.step > 0) {
    // Under 50 µs per step the wait is the hand-over between threads, not the loader's pace.
    double data = ph.data / ph.step;
    if (data >= 0.10 && ph.data >= 50e-6) {
      std::string action =
          s.loader_threads < 0 ? "prefetch batches on more threads"
          : s.loader_threads == 0
              ? "read batches ahead: raise --loader-threads above 0 (now 0: each batch is read "
                "inside the loop)"
              : "raise --loader-threads (now " + std::to_string(s.loader_threads) + ")";
      say("input-bound", data,
          "input-bound: " + percent(data) + " of the step waiting for data — " + action);
    }
    double host = ph.host / ph.step;
    if (host >= 0.25) {
      double per_step_kernels = 0;
      for (const KernelRow& row : s.kernels)
        per_step_kernels += static_cast<double>(row.calls);
      per_step_kernels /= static_cast<double>(s.steps);
      char line[320];
      std::snprintf(line, sizeof line,
                    "host-bound: %s of the step outside kernels and data (%.0f kernel launches "
                    "per step, %.1f ms of host work) — give the kernels more work per launch: "
                    "a larger --batch-size, or fewer calls between steps",
                    percent(host).c_str(), per_step_kernels, ph.host * 1e3);
      say("host-bound", host, line);
    }
    // Reading a GPU result makes the host wait for the step that made it: while it waits it
    // queues nothing, so the GPU idles between steps. (A profiled GPU step waits for its
    // events anyway, so the time shown is what is left after that wait.)
    if (s.device_reads >= 0.5) {
      char line[400];
      std::snprintf(line, sizeof line,
                    "host-syncs: the loop read %.1f device results per step (%.2f ms per step "
                    "in the reads) — each read waits for the GPU to finish the step, so the "
                    "host cannot queue the next one meanwhile: read the loss every few steps "
                    "(a LossHandle keeps it until read)",
                    s.device_reads, s.device_read_seconds * 1e3);
      say("host-syncs", s.device_reads, line);
    }
  }
  if (kernel_total > 0 && gemm_total / kernel_total >= 0.5) {
    double rate = gemm_flops / gemm_total / s.peak.flops_per_second;
    char line[320];
    std::snprintf(line, sizeof line,
                  "GEMM-bound: %s of kernel time in %lld GEMMs, at %s of the measured peak "
                  "FLOP/s — the math itself dominates: a lower precision (--amp bf16 on a GPU) "
                  "or larger GEMMs (a larger --batch-size) raise the rate",
                  percent(gemm_total / kernel_total).c_str(), static_cast<long long>(gemm_kernels),
                  percent(rate).c_str());
    say("gemm-bound", gemm_total / kernel_total, line);
  }
  for (const KernelRow& row : s.kernels) {
    if (row.share < 0.05) break;
    if (row.info.gemm || !row.memory_bound || row.achieved >= 0.6) continue;
    double per_call = row.seconds / static_cast<double>(row.calls);
    char line[480];
    std::snprintf(
        line, sizeof line,
        "memory-bound: %s (%s) takes %s of kernel time at %s of the measured "
        "bandwidth (%.1f of %.1f GB/s, %.2f MB per call) — it waits on memory: "
        "fewer bytes (a narrower dtype, --amp) or a layout read in order would help",
        row.info.name.c_str(), role_name(row.info.role), percent(row.share).c_str(),
        percent(row.achieved).c_str(), static_cast<double>(row.info.bytes) / per_call * 1e-9,
        s.peak.bandwidth_for(row.info.bytes) * 1e-9, static_cast<double>(row.info.bytes) * 1e-6);
    say("memory-bound", row.achieved, line);
    break;
  }
  if (!recompiles_.empty()) {
    // Shape buckets name theirs in the reason: one program per bucket is what they promise.
    bool bucketed = std::all_of(recompiles_.begin(), recompiles_.end(), [](const std::string& r) {
      return r.find("(shape bucket ") != std::string::npos;
    });
    say("recompiles", static_cast<double>(recompiles_.size()),
        "recompiled " + std::to_string(recompiles_.size()) + "×: " + recompiles_.back() +
            (bucketed ? " — one program per shape bucket, each compiled once: fewer buckets "
                        "compile less, more buckets pad less"
                      : " — a dimension that varies compiles a program per value: pad it to a "
                        "few sizes (shape buckets: StepOptions::buckets, gpt's "
                        "--variable-length)"));
  }

  closed_ = true;
  std::string trace = trace_json(s);
  events_.clear();
  events_.shrink_to_fit();
  write_file_atomically(dir_ / "summary.txt", s.text());
  write_file_atomically(dir_ / "trace.json", trace);
  write_file_atomically(dir_ / "report.html", report_html(s));
  return s;
}

std::string Profiler::trace_json(const Summary& summary) const {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  auto us = [](int64_t ns) { // a duration in microseconds
    char text[32];
    std::snprintf(text, sizeof text, "%.3f", static_cast<double>(ns) * 1e-3);
    return std::string(text);
  };
  auto at = [&](int64_t ns) { return us(ns - start_); }; // a time from the profile's start
  bool first = true;
  auto event = [&](std::string_view name, std::string_view cat, uint32_t tid, int64_t begin,
                   int64_t end, const std::string& args) {
    out += first ? "" : ",\n";
    first = false;
    out += "{\"name\":";
    json::append_quoted(out, name);
    out += ",\"cat\":\"" + std::string(cat) +
           "\",\"ph\":\"X\",\"pid\":1,\"tid\":" + std::to_string(tid) + ",\"ts\":" + at(begin) +
           ",\"dur\":" + us(end - begin) + ",\"args\":{" + args + "}}";
  };
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"sinter\"}}";
  first = false;
  for (std::size_t t = 0; t < thread_names_.size(); ++t) {
    out += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" + std::to_string(t + 1) +
           ",\"args\":{\"name\":";
    json::append_quoted(out, thread_names_[t]);
    out += "}}";
  }
  // Phase spans: runs of consecutive kernels of one role inside a traced run.
  struct Open {
    bool open = false;
    Role role{};
    int64_t begin = 0, end = 0;
    uint32_t tid = 0;
  } phase;
  auto close_phase = [&] {
    if (phase.open) event(role_name(phase.role), "phase", phase.tid, phase.begin, phase.end, "");
    phase.open = false;
  };
  for (const Event& e : events_) {
    switch (e.category) {
    case Category::step:
      event("step " + std::to_string(e.index), "step", e.tid, e.begin, e.end, "");
      break;
    case Category::data: event("waiting for data", "data", e.tid, e.begin, e.end, ""); break;
    case Category::fill:
      event("fill batch", "loader", e.tid, e.begin, e.end, "\"batch\":" + std::to_string(e.index));
      break;
    case Category::compile:
      event("compile " + compile_labels_[static_cast<std::size_t>(e.index)], "compile", e.tid,
            e.begin, e.end, "");
      break;
    case Category::run: {
      close_phase();
      const Program& p = programs_.at(e.program);
      event(p.label, "run", e.tid, e.begin, e.end, "");
      break;
    }
    case Category::kernel: {
      const KernelInfo& k = programs_.at(e.program).kernels[static_cast<std::size_t>(e.index)];
      if (!phase.open || phase.role != k.role || phase.tid != e.tid) {
        close_phase();
        phase = {true, k.role, e.begin, e.end, e.tid};
      }
      phase.end = e.end;
      std::string args = "\"path\":";
      json::append_quoted(args, k.path);
      args += ",\"role\":\"" + std::string(role_name(k.role)) + "\",\"kind\":\"" + k.kind +
              "\",\"bytes\":" + std::to_string(k.bytes) + ",\"flops\":" + std::to_string(k.flops);
      event(k.name, "kernel", e.tid, e.begin, e.end, args);
      break;
    }
    }
  }
  close_phase();
  for (const auto& [ts, busy] : cpu_samples_) {
    out += ",\n{\"name\":\"cpu use\",\"ph\":\"C\",\"pid\":1,\"ts\":" + at(ts) + ",\"args\":{";
    for (std::size_t c = 0; c < busy.size(); ++c) {
      char value[48];
      std::snprintf(value, sizeof value, "%s\"cpu%zu\":%.1f", c ? "," : "", c, busy[c] * 100);
      out += value;
    }
    out += "}}";
  }
  char meta[256];
  std::snprintf(meta, sizeof meta,
                "\n],\"otherData\":{\"steps\":%lld,\"peak_bytes_per_second\":%.0f,"
                "\"peak_flops_per_second\":%.0f}}\n",
                static_cast<long long>(summary.steps), summary.peak.bytes_per_second,
                summary.peak.flops_per_second);
  out += meta;
  return out;
}

} // namespace detail

using detail::percent;

std::vector<std::pair<const char*, double>> PhaseTimes::parts() const {
  return {{"data", data},
          {"copies", copies},
          {"forward", forward},
          {"teacher", teacher},
          {"backward", backward},
          {"optimizer", optimizer},
          {"collectives", collectives},
          {"other programs", other_programs},
          {"host", host}};
}

std::string Summary::text() const {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "sinter profile: %lld steps (%lld left out: warm-up or compiles), %.2f ms per "
                "step, %lld compiles → %s\n",
                static_cast<long long>(steps), static_cast<long long>(skipped), phases.step * 1e3,
                static_cast<long long>(compiles), dir.string().c_str());
  out += line;
  if (steps > 0) {
    out += "  phases:";
    for (const auto& [name, seconds] : phases.parts()) {
      if (seconds <= 0 && std::string_view(name) != "host") continue;
      std::snprintf(line, sizeof line, " %s %.2f ms (%s),", name, seconds * 1e3,
                    percent(phases.step > 0 ? seconds / phases.step : 0).c_str());
      out += line;
    }
    out.back() = '\n';
  }
  std::snprintf(line, sizeof line,
                "  device peak: %.1f GB/s in caches, %.1f GB/s from memory, %.1f GFLOP/s (%s)\n",
                peak.bytes_per_second * 1e-9,
                (peak.bandwidth_by_bytes.empty() ? 0.0 : peak.bandwidth_by_bytes.back().second) *
                    1e-9,
                peak.flops_per_second * 1e-9, peak.how.c_str());
  out += line;
  if (!peak.bandwidth_by_bytes.empty()) {
    out += "  bandwidth by bytes per call:";
    for (const auto& [bytes, rate] : peak.bandwidth_by_bytes) {
      std::snprintf(line, sizeof line, " %s %.1f GB/s,", format_bytes(bytes).c_str(), rate * 1e-9);
      out += line;
    }
    out.back() = '\n';
  }
  if (!cpu_use.empty()) {
    out += "  cpu use per core:";
    for (double c : cpu_use)
      out += " " + percent(c);
    out += "\n";
  }
  out += "  top kernels:\n";
  for (std::size_t i = 0; i < kernels.size() && i < 8; ++i) {
    const KernelRow& k = kernels[i];
    std::snprintf(line, sizeof line, "    %5.1f%%  %8.3f ms/call  %-9s %s of %s peak  %s [%s]",
                  k.share * 100, k.seconds / static_cast<double>(k.calls) * 1e3,
                  role_name(k.info.role), percent(k.achieved).c_str(),
                  k.memory_bound ? "bandwidth" : "FLOP/s", k.info.name.c_str(), k.program.c_str());
    out += line;
    if (k.info.predicted_seconds > 0) {
      std::snprintf(line, sizeof line, "  predicted %.3f ms", k.info.predicted_seconds * 1e3);
      out += line;
    }
    out += "\n";
  }
  if (verdicts.empty()) out += "  verdict: balanced — no phase or kernel stands out\n";
  for (const Verdict& v : verdicts)
    out += "  verdict: " + v.line + "\n";
  return out;
}

} // namespace sinter::profile
