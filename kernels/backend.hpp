#pragma once
// The seam between the benchmarks and the hardware. A backend owns memory,
// random fill, the operations, the timer, the device description and its
// ceilings; the fixtures in bench/ only describe what to run (an OpRequest,
// phasebench/op.hpp) and never know which backend runs it. The CPU backend is
// the first backend, the CUDA backend the second; neither is a special case.
// Each backend implements operations by kind: an operation's file next to its
// kernel registers an OpImpl (OpImpls below), and the backend looks it up.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "phasebench/dtype.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/op.hpp"
#include "phasebench/roofline.hpp"
#include "timing.hpp"

namespace phasebench {

// What a backend is and what it runs on, for the results file.
struct DeviceInfo {
  std::string backend;  // "cpu" or "cuda"
  std::string name;     // as the driver / OS reports it
  std::string slug;     // file-system-safe, for results/<slug>/
  std::uint64_t memory_bytes = 0;     // total memory usable by the backend
  std::uint64_t cache_bytes = 0;      // last-level cache (L2 on a GPU), for cold-cache flushing
  std::optional<GpuSpec> spec;        // the matched datasheet entry; empty when unknown
  nlohmann::json details = nlohmann::json::object();  // architecture, SMs, clocks, versions, ...
};

// An operation prepared on a backend: inputs allocated and filled with random
// non-zero data, outputs allocated. Everything costly happens in prepare(),
// outside any timed region.
class PreparedOp {
 public:
  virtual ~PreparedOp() = default;
  // Enqueue one execution (asynchronous on a GPU; the backend's timer synchronises).
  virtual void run() = 0;
  // Run once and compare the output with the CPU reference on random data;
  // throws VerificationError naming the first mismatch.
  virtual void verify() = 0;
  // The output of the last run(), decoded to floats (for tests that compare
  // two implementations on the same data). Backends that cannot provide it throw.
  virtual std::vector<float> output_values();
  // What the implementation says of itself, for the point's JSON (`impl_detail`,
  // written by the fixture as it is): a library's versions and the engine or
  // plan it chose for this point. Read once after prepare; empty: nothing.
  virtual std::map<std::string, std::string> notes() const { return {}; }
  // Why every sample of this op must be one launch (no graph of hot launches, no
  // rotating copies), or nothing: the op's own reason, recorded as the sample's
  // why_single (the collectives: a copy of the op would need communicators of its own).
  virtual std::optional<std::string> single_launch_only() const { return std::nullopt; }
};

struct TimingOptions {
  bool cold_cache = true;  // flush the last-level cache before each sample, outside the region
  std::string range_name;  // NVTX range around the timed region (the benchmark's name)
  // Cold short launches on a GPU: rotating copies in one graph, or one launch (timing.hpp).
  ColdTiming cold_timing = ColdTiming::rotate;
};

// One timed sample.
struct Sample {
  double seconds = 0;     // per run() call
  std::uint64_t runs = 1; // run() calls timed together (CUDA graphs of short launches)
  // The SM clock read right after the sample (MHz), where the backend can read
  // it: the fixture sets aside samples taken at a clock far below the run's
  // highest (nvbench's clock-ratio check).
  std::optional<double> sm_mhz;
  // How it was timed: "single" (one run() between the timer's marks), "graph"
  // (hot: a CUDA graph of `runs` launches of the op) or "rotating_graph" (cold:
  // a CUDA graph running each of `runs` copies of the op once, `rotating_bytes`
  // of data in all); `why_single` says why a short cold launch was timed singly.
  std::string method = "single";
  std::uint64_t rotating_bytes = 0;
  std::string why_single;
};

// A reading of the device's cumulative energy counter: joules since some fixed
// moment (the GPU board through NVML; the CPU packages through RAPL), or why not.
struct EnergyReading {
  bool ok = false;
  double joules = 0;
  std::string error;  // when !ok: "not available: ..."
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const DeviceInfo& device() const = 0;
  // Every known ceiling: datasheet and theoretical ones, plus the measured ones
  // once measure_ceilings() has run.
  virtual Ceilings ceilings() const = 0;
  // Calibrate the measured ceilings (bandwidth; a large GEMM per dtype). Once per process.
  virtual void measure_ceilings(const std::vector<DType>& dtypes) = 0;
  // The measured read bandwidth (bytes/s) once more, by the same method as the
  // ceiling: run after a sweep, it shows whether the machine's bandwidth moved
  // while the sweep ran. Nothing when the backend cannot measure it.
  virtual std::optional<double> remeasure_read_bandwidth() { return std::nullopt; }
  // One streaming read of a buffer of a few times the last-level cache, by the
  // ceiling's method: bytes/s. The fixture times one right before each sample
  // of a large memory-bound point, so each sample has the bandwidth of the same
  // moment beside it (on a shared machine the read ceiling moves by a third
  // within minutes). Nothing when the backend does not offer it.
  virtual std::optional<double> paired_read() { return std::nullopt; }
  // How paired_read() reads (for the points' paired_read.method), where it is offered.
  virtual std::string paired_read_method() const { return {}; }
  // Whether the backend implements this kind of operation for this element type
  // and implementation at all (sweeps are built from it).
  virtual bool implements(std::string_view kind, DType dtype, Impl impl) const = 0;
  // Whether the implementation is meant for this request at all (our decode
  // GEMV: small batches); a sweep leaves out what does not apply, and skips, with
  // the reason, what applies but cannot run here.
  virtual bool applies(const OpRequest& r) const = 0;
  // Why this particular request cannot run here (does not fit in memory, shape
  // not supported by the kernel), or nothing if it can.
  virtual std::optional<std::string> cannot_run(const OpRequest& r) const = 0;
  virtual std::unique_ptr<PreparedOp> prepare(const OpRequest& r) = 0;
  // Why this backend cannot time anything (the CUDA backend built over the
  // functional emulation, kernels/cuda_emu), or nothing. Such a backend still
  // prepares, runs and verifies operations.
  virtual std::optional<std::string> cannot_time() const { return std::nullopt; }
  // One sample: flush (when cold) outside the region, then time the region.
  virtual Sample time(PreparedOp& op, const TimingOptions& opts) = 0;
  // Wait for all work the backend enqueued (run() is asynchronous on a GPU).
  virtual void synchronize() = 0;
  // Profile mode: run once inside the NVTX range, between profiler start/stop.
  virtual void profile(PreparedOp& op, const std::string& range_name) = 0;
  // Clocks now (SM and memory, MHz) and throttle reasons, when the backend can read them.
  virtual nlohmann::json clocks() const { return nlohmann::json::object(); }
  // A group of samples (one sampling call of a point) begins and ends: what the
  // device's limiters and clocks did in between (timing.hpp), where the backend
  // can tell; the fixture judges whether the point ran throttled.
  virtual void begin_sample_group() {}
  virtual std::optional<ThrottleWindow> end_sample_group() { return std::nullopt; }
  // Why samples carry no SM clock on this backend (Sample::sm_mhz), or nothing when they do.
  virtual std::optional<std::string> clocks_unavailable() const { return std::string("the backend reads no clocks"); }
  // The cumulative energy counter now, and what it counts (the JSON's energy source).
  virtual EnergyReading energy() { return {false, 0, "not available: this backend has no energy counter"}; }
  virtual std::string energy_source() const { return {}; }
  // Counted, never timed: what the kernels of one run() of `op` did, launch by
  // launch (memory requests and sectors, distinct bytes per buffer, shared-memory
  // wavefronts, barriers, collectives, bytes in flight, resources and occupancy),
  // as JSON (the counters of docs/design.md). Only the CUDA backend over the
  // emulation's counting build (phasebench-counters) counts; cannot_count() says
  // why any other cannot.
  virtual std::optional<std::string> cannot_count() const {
    return std::string("the ") + device().backend + " backend has no counters";
  }
  virtual nlohmann::json count(PreparedOp& op) {
    (void)op;
    throw std::logic_error("count: " + cannot_count().value_or("this backend cannot count"));
  }
};

// One implementation of an operation on a backend whose state is `Env` (the
// CPU's, or the CUDA context): registered by the operation's file next to its kernel.
template <class Env>
struct OpImpl {
  std::string kind;
  Impl impl = Impl::own;
  // The element types it takes (on this device).
  std::function<bool(DType, const Env&)> dtypes;
  // Whether it is meant for this request (empty: always; see Backend::applies).
  std::function<bool(const OpRequest&)> applies;
  // Why it cannot run this request here: shape, type and device limits (empty:
  // none). Memory is checked by the backend from the footprint and the scratch.
  std::function<std::optional<std::string>(const OpRequest&, const Env&)> unsupported;
  // Bytes it allocates beyond the operation's declared footprint (empty: none).
  std::function<std::uint64_t(const OpRequest&, const Env&)> scratch_bytes;
  std::function<std::unique_ptr<PreparedOp>(Env&, const OpRequest&)> prepare;
};

// A backend's implementations, by kind and impl (Entry: OpImpl<Env>, or a
// backend's own entry with the same kind, impl and dtypes).
template <class Env, class Entry = OpImpl<Env>>
class OpImpls {
 public:
  void add(Entry i) {
    if (find(i.kind, i.impl)) throw std::logic_error("two implementations of " + i.kind + " " + std::string(to_string(i.impl)));
    impls_.push_back(std::move(i));
  }
  const Entry* find(std::string_view kind, Impl impl) const {
    for (const auto& i : impls_)
      if (i.kind == kind && i.impl == impl) return &i;
    return nullptr;
  }
  // The implementation that runs `r` on `env`, or nullptr.
  const Entry* find(const OpRequest& r, const Env& env) const {
    const auto* i = find(r.kind, r.impl);
    return i && i->dtypes(r.dtype, env) ? i : nullptr;
  }

 private:
  std::vector<Entry> impls_;
};

// "cpu", "cuda" or "auto" (CUDA when a device is present, else CPU). `why`
// receives a sentence saying which backend was chosen and why.
std::unique_ptr<Backend> make_backend(const std::string& which, std::string* why);
// Whether this build has the CUDA backend, and whether a CUDA device is present.
bool cuda_backend_built();
// Whether this program is the counting build of the CUDA emulation (phasebench-counters).
bool counting_build();
std::unique_ptr<Backend> make_cuda_backend(std::string* why);  // nullptr when no device (why says so)
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace phasebench
