// jit/runtime/kernel_lookup.hpp — the one way every backend gets a kernel: structural cache key,
// then memory, then the disk cache, then compile and store
#pragma once
#include "jit/passes/fuse.hpp"
#include "jit/runtime/compile_report.hpp"
#include "jit/runtime/kernel_cache.hpp"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace sinter {

/// The cache key of a kernel: its structure, shapes and dtypes, and the target's fingerprint,
/// computed from the IR before any code generation.
CacheKey kernel_key(const FusionPlan& plan, const Kernel& kernel, const std::string& fingerprint);

/// The kernel's symbol: `sinter_<model path>_<role>_<key>`, e.g.
/// `sinter_blocks_N_attn_bwd_softmax_reduce_sum_<32 hex>`, so profilers (perf, ncu, nsys) say
/// which part of the model a kernel computes. The path is the scope of the kernel's root
/// (layer indices read N: one compiled kernel serves every layer of the same shape; `bwd` marks
/// gradient code, a composite's name the code it was lowered from), the role its kind and
/// root op.
std::string kernel_symbol(const FusionPlan& plan, const Kernel& kernel, const CacheKey& key);

/// A cache payload that carries its symbol (the first process to compile a kernel names it; the
/// others load that name), and the reverse; nullopt for a payload without one.
std::vector<char> named_payload(const std::string& symbol, std::span<const char> binary);
std::optional<std::pair<std::string, std::vector<char>>>
split_named_payload(std::span<const char> payload);

/// A kernel to fetch: `plan`'s `kernel` is what gets compiled and, with `variant` (how the code
/// is generated beyond the IR, e.g. a launch it was specialised for), its cache key; `step_plan`
/// and `step_kernel`, when the kernel stands in for another one of the step (a
/// RuntimeRowsKernel instance), name it and report it.
struct KernelRequest {
  const FusionPlan* plan = nullptr;
  const Kernel* kernel = nullptr;
  std::string variant;
  const FusionPlan* step_plan = nullptr;
  const Kernel* step_kernel = nullptr;

  const FusionPlan& named_plan() const { return step_plan ? *step_plan : *plan; }
  const Kernel& named_kernel() const { return step_kernel ? *step_kernel : *kernel; }
};

/// A backend's loaded kernels (`Entry`: a function pointer, a CUfunction, ...) in front of the
/// persistent cache and its code generator. The backend supplies how to compile a kernel to a
/// binary (object file, cubin) and how to load a binary; the policy is here, once.
template <class Entry> class KernelLookup {
public:
  /// Generated code for `symbol` (what the disk cache stores).
  using Compile = std::function<std::vector<char>(const std::string& symbol)>;
  /// The loaded entry point of a binary from Compile or the disk cache.
  using Load = std::function<Entry(std::span<const char> binary, const std::string& symbol)>;

  explicit KernelLookup(std::string fingerprint) : fingerprint_(std::move(fingerprint)) {}

  const std::string& fingerprint() const { return fingerprint_; }

  /// Compiles, on up to `threads` threads at once, each of `requests` that is neither loaded
  /// nor in `disk`, so that the get() calls that follow find it ready: a cold compile's
  /// kernels are independent, and code generation and the PTX assembler take most of it. A
  /// kernel that fails here is left for its get() to compile again and report.
  using CompileKernel =
      std::function<std::vector<char>(const KernelRequest& request, const std::string& symbol)>;
  void compile_ahead(std::span<const KernelRequest> requests, KernelCache& disk,
                     const CompileKernel& compile, unsigned threads) {
    struct Job {
      const KernelRequest* request;
      CacheKey key;
      std::string symbol;
    };
    std::vector<Job> jobs;
    {
      std::lock_guard lock(mutex_);
      for (const KernelRequest& request : requests) {
        CacheKey key = key_of(request);
        bool queued =
            std::any_of(jobs.begin(), jobs.end(), [&](const Job& j) { return j.key == key; });
        std::error_code ec; // an entry on disk is loaded (and validated) by get()
        if (queued || loaded_.contains(key) || ready_.contains(key) ||
            std::filesystem::exists(disk.entry_path(key), ec))
          continue;
        jobs.push_back(
            {&request, key, kernel_symbol(request.named_plan(), request.named_kernel(), key)});
      }
    }
    if (jobs.size() < 2 || threads < 2) return; // get() compiles them one by one as well
    std::atomic<std::size_t> next = 0;
    auto work = [&] {
      for (std::size_t i; (i = next.fetch_add(1)) < jobs.size();) {
        try {
          std::vector<char> binary = compile(*jobs[i].request, jobs[i].symbol);
          std::lock_guard lock(mutex_);
          ready_.emplace(jobs[i].key, Ready{jobs[i].symbol, std::move(binary)});
        } catch (const std::exception&) {
        }
      }
    };
    std::vector<std::thread> workers;
    for (unsigned t = 1; t < std::min<std::size_t>(threads, jobs.size()); ++t)
      workers.emplace_back(work);
    work();
    for (std::thread& w : workers)
      w.join();
  }

  /// Whether the request's kernel is loaded or compiled ahead (get() needs no code generation).
  bool has(const KernelRequest& request) {
    CacheKey key = key_of(request);
    std::lock_guard lock(mutex_);
    return loaded_.contains(key) || ready_.contains(key);
  }

  /// The kernel's entry point: from memory, from `disk` (validated) or compiled (then stored
  /// there; compile_ahead may have compiled it already). Counts what happened in `report`.
  /// Thread-safe; `load` runs under the lock.
  Entry get(const FusionPlan& plan, const Kernel& kernel, KernelCache& disk, CompileReport& report,
            const Compile& compile, const Load& load) {
    return get(KernelRequest{.plan = &plan, .kernel = &kernel}, disk, report, compile, load);
  }
  Entry get(const KernelRequest& request, KernelCache& disk, CompileReport& report,
            const Compile& compile, const Load& load) {
    const Kernel& kernel = request.named_kernel();
    CacheKey key = key_of(request);
    std::lock_guard lock(mutex_);
    if (auto it = loaded_.find(key); it != loaded_.end()) {
      ++report.generated;
      ++report.from_memory;
      report.origins.push_back({kernel.root, KernelOrigin::From::memory, it->second.symbol});
      return it->second.entry;
    }
    std::string symbol;
    std::vector<char> binary;
    std::optional<std::vector<char>> cached;
    if (auto ready = ready_.find(key); ready != ready_.end()) {
      symbol = std::move(ready->second.symbol);
      binary = std::move(ready->second.binary);
      ready_.erase(ready);
    } else {
      cached = disk.load(key);
    }
    auto named = cached ? split_named_payload(*cached) : std::nullopt;
    if (!binary.empty()) {
      disk.store(key, named_payload(symbol, binary));
      disk.note_compiled();
      ++report.compiled;
      report.origins.push_back({kernel.root, KernelOrigin::From::compiled, symbol});
    } else if (named) {
      symbol = std::move(named->first);
      binary = std::move(named->second);
      ++report.from_disk;
      report.origins.push_back({kernel.root, KernelOrigin::From::disk, symbol});
    } else {
      symbol = kernel_symbol(request.named_plan(), kernel, key);
      binary = compile(symbol); // a failure counts nothing and stores nothing
      disk.store(key, named_payload(symbol, binary));
      disk.note_compiled();
      ++report.compiled;
      report.origins.push_back({kernel.root, KernelOrigin::From::compiled, symbol});
    }
    Entry entry = load(binary, symbol);
    loaded_.emplace(key, Loaded{entry, symbol});
    ++report.generated;
    return entry;
  }

  /// The request's cache key: its kernel's structure, the target fingerprint and the variant.
  CacheKey key_of(const KernelRequest& request) const {
    return kernel_key(*request.plan, *request.kernel,
                      request.variant.empty() ? fingerprint_
                                              : fingerprint_ + ";" + request.variant);
  }

private:
  struct KeyHash {
    std::size_t operator()(const CacheKey& k) const { return k.lo ^ (k.hi * 31); }
  };
  std::string fingerprint_;
  std::mutex mutex_;
  struct Loaded {
    Entry entry;
    std::string symbol;
  };
  std::unordered_map<CacheKey, Loaded, KeyHash> loaded_;
  struct Ready {
    std::string symbol;
    std::vector<char> binary;
  };
  std::unordered_map<CacheKey, Ready, KeyHash> ready_; ///< compiled ahead, not loaded yet
};

} // namespace sinter
