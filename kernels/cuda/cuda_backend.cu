// The CUDA backend: device 0, one non-blocking stream, cuBLAS and cuBLASLt
// handles bound to it, a 64 MiB cuBLASLt workspace; the device description,
// the ceilings, the operations (registered by their files, cuda_op.hpp),
// CUDA-event timing (single launches, graphs of hot launches, rotating copies
// for cold short ones) and the clocks and limiters read through NVML.
#include <cuda_profiler_api.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "backend.hpp"
#include "cuda/ceilings.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/nvml_clocks.hpp"
#include "cuda/rank_context.hpp"
#include "phasebench/processes.hpp"
#include "cuda/rotating_graph.hpp"
#include "cuda/stream_read.hpp"
#include "phasebench/error.hpp"
#include "phasebench/nvtx.hpp"
#if PHASEBENCH_CUDA_EMU
#include "counting.hpp"  // the emulation's counters (kernels/cuda_emu)
#include "resources.hpp"
#endif

namespace phasebench {

namespace cuda {
namespace {

// A launch shorter than this is timed as a CUDA graph of many launches (hot
// cache only, see CudaBackend::time), sized to last at least kGraphSeconds.
constexpr double kShortLaunchSeconds = 20e-6;
constexpr double kGraphSeconds = 200e-6;
constexpr std::uint64_t kMaxGraphRuns = 1000;
// A cold sample of an op whose hot launch is shorter than this, and whose data
// is under twice the L2, is timed over rotating copies (ColdTiming::rotate): its
// fixed launch cost (1.5-3 us: the gap, the ramp, a dependent second launch) is
// then more than about 2% of it.
constexpr double kRotateBelowSeconds = 100e-6;
// Hot samples (and calibration) start with a kernel that keeps the GPU busy this
// long, so that the start event and the op are queued behind it and the
// interval holds no host-side launch latency (cold samples have the flush).
constexpr unsigned long long kHoldNanoseconds = 50000;

__global__ void hold_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

std::string slug_of(const std::string& name) {
  std::string s;
  for (unsigned char c : name) {
    if (std::isalnum(c))
      s += static_cast<char>(std::tolower(c));
    else if (!s.empty() && s.back() != '-')
      s += '-';
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s.empty() ? "unknown-gpu" : s;
}

std::string version_string(int v) {  // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string architecture_of(int major, int minor) {
  const int cc = major * 10 + minor;
  if (cc >= 100) return "blackwell";
  if (cc == 90) return "hopper";
  if (cc == 89) return "ada";
  if (cc >= 80) return "ampere";
  if (cc >= 75) return "turing";
  if (cc >= 70) return "volta";
  return "older";
}

int attribute(cudaDeviceAttr a, int device, const char* name) {
  int v = 0;
  cudaError_t e = cudaDeviceGetAttribute(&v, a, device);
  if (e != cudaSuccess) throw_cuda_error(e, name, __FILE__, __LINE__);
  return v;
}

#if PHASEBENCH_CUDA_EMU
// The counters of one window as JSON: a list of launches, each with the fields
// docs/design.md names beside their Nsight Compute metrics.
nlohmann::json traffic_json(const pb_emu::counters::Traffic& t) {
  return {{"requests", t.requests}, {"lanes", t.lanes}, {"bytes", t.bytes}, {"sectors", t.sectors}, {"ideal", t.ideal}};
}

nlohmann::json counters_json(const std::vector<pb_emu::counters::Launch>& launches) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& L : launches) {
    nlohmann::json j;
    j["kind"] = L.kind;
    j["kernel"] = L.kernel;
    j["short_name"] = L.kind == "kernel" ? pb_emu::short_function_name(L.kernel) : L.kernel;
    if (L.kind != "kernel") {
      j["bytes_read"] = L.copy_bytes_read;
      j["bytes_written"] = L.copy_bytes_written;
      out.push_back(std::move(j));
      continue;
    }
    j["grid"] = {L.grid.x, L.grid.y, L.grid.z};
    j["block"] = {L.block.x, L.block.y, L.block.z};
    j["blocks"] = L.blocks;
    j["threads_per_block"] = L.block.x * L.block.y * L.block.z;
    j["dynamic_smem"] = L.dynamic_smem;
    j["static_smem_emulated"] = L.static_smem;
    if (L.failed) j["failure"] = L.failure;
    j["global"] = {{"ld", traffic_json(L.global_ld)}, {"st", traffic_json(L.global_st)},
                   {"atom", traffic_json(L.global_atom)}, {"ldgsts", traffic_json(L.ldgsts)}};
    j["shared"] = {{"ld", traffic_json(L.shared_ld)}, {"st", traffic_json(L.shared_st)},
                   {"atom", traffic_json(L.shared_atom)}, {"ldsm", traffic_json(L.ldsm)},
                   {"ldgsts", traffic_json(L.ldgsts_shared)}};
    j["unique_bytes_read"] = L.unique_read;
    j["unique_bytes_written"] = L.unique_written;
    j["sectors_read"] = L.sectors_read;
    j["sectors_written"] = L.sectors_written;
    j["barriers"] = L.barriers;
    j["shfl"] = L.shfl;
    j["vote"] = L.vote;
    j["syncwarp"] = L.syncwarp;
    j["collective_lanes"] = L.collective_lanes;
    j["mma"] = L.mma;
    j["warps"] = L.warps;
    j["memory_instructions"] = L.memory_instructions();
    j["memory_lanes"] = L.memory_lanes();
    j["inflight"] = {{"mean_bytes_per_thread", L.inflight_events ? L.inflight_sum / static_cast<double>(L.inflight_events) : 0.0},
                     {"max_bytes_per_thread", L.inflight_max},
                     {"events", L.inflight_events},
                     {"async_events", L.inflight_async_events}};
    j["other_accesses"] = L.other_accesses;
    nlohmann::json bufs = nlohmann::json::array();
    for (const auto& b : L.buffers)
      bufs.push_back({{"id", b.id}, {"size", b.size}, {"unique_bytes_read", b.unique_read},
                      {"unique_bytes_written", b.unique_written}, {"sectors_read", b.sectors_read},
                      {"sectors_written", b.sectors_written}, {"ld", traffic_json(b.ld)}, {"st", traffic_json(b.st)},
                      {"atom", traffic_json(b.atom)}, {"ldgsts", traffic_json(b.ldgsts)}});
    j["buffers"] = std::move(bufs);
    nlohmann::json sites = nlohmann::json::array();
    for (const auto& w : L.wasteful_sites)
      sites.push_back({{"kind", w.kind}, {"where", w.where}, {"requests", w.traffic.requests},
                       {"sectors", w.traffic.sectors}, {"ideal", w.traffic.ideal}, {"bytes", w.traffic.bytes}});
    j["wasteful_sites"] = std::move(sites);
    const auto& r = L.resources;
    j["resources"] = {{"known", r.known}, {"arch", r.arch}, {"registers", r.registers}, {"static_smem", r.static_smem},
                      {"stack_frame", r.stack_frame}, {"spill_stores", r.spill_stores}, {"spill_loads", r.spill_loads}};
    const auto& o = L.occupancy;
    j["occupancy"] = {{"blocks_per_sm", o.blocks_per_sm}, {"warps_per_sm", o.warps_per_sm},
                      {"max_warps_per_sm", o.max_warps_per_sm}, {"limiter", o.limiter}, {"from_resources", o.from_resources}};
    out.push_back(std::move(j));
  }
  return out;
}
#endif

// What the backend hands out: the operation plus what timing learns about it
// (whether one launch is too short to time alone, and the graph then used).
class TimedOp final : public PreparedOp {
 public:
  TimedOp(std::unique_ptr<PreparedOp> inner, OpRequest r, CheckedRequest c)
      : request(std::move(r)), checked(std::move(c)), inner_(std::move(inner)) {}
  ~TimedOp() override {
    if (graph_) cudaGraphExecDestroy(graph_);
    rotation.reset();  // its graph and copies before the op it copies
  }
  PreparedOp& inner() { return *inner_; }
  void run() override { inner_->run(); }
  void verify() override { inner_->verify(); }
  std::vector<float> output_values() override { return inner_->output_values(); }
  std::map<std::string, std::string> notes() const override { return inner_->notes(); }
  std::optional<std::string> single_launch_only() const override { return inner_->single_launch_only(); }

  bool calibrated = false;
  double single_seconds = 0;  // fastest hot single launch seen in calibration
  bool short_launch = false;
  std::uint64_t graph_runs = 0;
  bool graph_tried = false;  // capture attempted (once, on the first hot sample)
  cudaGraphExec_t graph_ = nullptr;
  std::string graph_problem;  // why no graph could be captured, when short
  // Cold samples over rotating copies (built on the first cold sample from the
  // plan this op was built from).
  const OpRequest request;
  const CheckedRequest checked;
  bool rotation_tried = false;
  std::unique_ptr<RotatingGraph> rotation;
  std::uint64_t rotating_bytes = 0;
  std::string rotation_why;  // why cold samples are single launches

 private:
  std::unique_ptr<PreparedOp> inner_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) {
    try {
      start(device);
    } catch (...) {
      release();  // the destructor does not run for a constructor that throws
      throw;
    }
  }

  ~CudaBackend() override { release(); }

  void start(int device) {
    ctx_.device = device;
    PB_CUDA_CHECK(cudaSetDevice(device));
    read_device();
    open_handles(ctx_);
    PB_CUDA_CHECK(cudaEventCreate(&start_));
    PB_CUDA_CHECK(cudaEventCreate(&stop_));
    sink_ = DeviceBuffer(sizeof(unsigned));
    // The cold-cache flush buffer, allocated now so that no sample allocates and
    // the memory checks of cannot_run() see it as taken.
    // 4x the L2 (at least 2x is needed; the replacement policy is not exactly LRU).
    const std::size_t flush_bytes = std::max<std::size_t>(kBeyondCachesFactor * info_.cache_bytes, 16ull << 20) / 16 * 16;
    flush_ = DeviceBuffer(flush_bytes);
    PB_CUDA_CHECK(cudaMemsetAsync(flush_.get(), 0x3c, flush_bytes, ctx_.stream));
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    describe_device();
  }

  void release() noexcept {
    // Nothing here may throw; errors on teardown have no remedy.
    if (ctx_.stream) cudaStreamSynchronize(ctx_.stream);
    if (stop_) cudaEventDestroy(stop_);
    if (start_) cudaEventDestroy(start_);
    flush_ = DeviceBuffer();
    sink_ = DeviceBuffer();
    close_handles(ctx_);
    stop_ = start_ = nullptr;
  }

  const DeviceInfo& device() const override { return info_; }

  Ceilings ceilings() const override {
    // Measured first, so each pick among equals takes the read kernel's bandwidth.
    Ceilings all;
    for (const auto& c : measured_.bandwidth()) all.add_bandwidth(c);
    for (const auto& c : measured_.cache_bandwidth()) all.add_cache_bandwidth(c);
    for (const auto& [t, v] : measured_.compute())
      for (const auto& c : v) all.add_compute(t, c);
    if (info_.spec) {
      const auto d = info_.spec->ceilings();
      for (const auto& c : d.bandwidth()) all.add_bandwidth(c);
      for (const auto& [t, v] : d.compute())
        for (const auto& c : v) all.add_compute(t, c);
    }
    const auto th = theoretical_ceilings(facts_);
    for (const auto& c : th.bandwidth()) all.add_bandwidth(c);
    for (const auto& [t, v] : th.compute())
      for (const auto& c : v) all.add_compute(t, c);
    return all;
  }

  std::optional<std::string> cannot_time() const override {
    if (functional_emulation()) return std::string(kEmulationCannotTime);
    return std::nullopt;
  }

  void measure_ceilings(const std::vector<DType>& dtypes) override {
    if (auto why = cannot_time()) throw std::logic_error("measure_ceilings: " + *why);
    // Once per process: bandwidth once, each dtype's GEMM once.
    if (!bandwidth_measured_) {
      measure_bandwidth(ctx_, facts_, measured_);
      measure_l2_bandwidth(ctx_, facts_, measured_);
      bandwidth_measured_ = true;
    }
    for (DType t : dtypes) {
      if (gemm_tried_.count(t)) continue;
      gemm_tried_.insert(t);
      std::string why;
      if (!measure_gemm(ctx_, t, measured_, &why)) info_.details["ceilings_not_measured"][std::string(to_string(t))] = why;
    }
  }

  std::optional<double> remeasure_read_bandwidth() override {
    if (!bandwidth_measured_ || cannot_time()) return std::nullopt;
    Ceilings again;
    measure_bandwidth(ctx_, facts_, again);  // the read kernel's figure comes first
    if (again.bandwidth().empty()) return std::nullopt;
    return again.bandwidth().front().value;
  }

  bool implements(std::string_view kind, DType dtype, Impl impl) const override {
    const auto* i = all_ops().find(kind, impl);
    return i && i->dtypes(dtype, ctx_);
  }

  bool applies(const OpRequest& r) const override {
    const auto* i = all_ops().find(r, ctx_);
    return i && (!i->applies || i->applies(r));
  }

  // Head-room for library scratch beyond the context's workspace (the flush
  // buffer is allocated already, so free memory accounts for it). The check
  // plans the request; the plan is kept for the prepare() of the same request
  // that follows (a point asks cannot_run, then prepares), so a point is
  // checked and planned once.
  std::optional<std::string> cannot_run(const OpRequest& r) const override {
    last_check_ = LastCheck{r, check_request(ctx_, r, kCublasLtWorkspaceBytes)};
    return last_check_->checked.why;
  }

  std::unique_ptr<PreparedOp> prepare(const OpRequest& r) override {
    CheckedRequest c;
    if (last_check_ && same_request(last_check_->request, r))
      c = std::move(last_check_->checked);
    else
      c = check_request(ctx_, r, kCublasLtWorkspaceBytes);
    last_check_.reset();
    auto op = make_op(ctx_, r, c);  // Unsupported with the check's reason when it cannot run
    return std::make_unique<TimedOp>(std::move(op), r, std::move(c));
  }

  void synchronize() override { PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream)); }

  // Timing. Cold cache (the default): before the sample, outside the events, a
  // read of a buffer 4x the L2 evicts the op's data (reading, so the op does
  // not pay to write back dirty lines). Then, for an op whose hot launch is
  // under 100 us and whose data is under twice the L2 (--cold-timing rotate,
  // the default), one CUDA graph runs each of k copies of the op once (own
  // inputs, outputs and scratch; allocations covering 2x the L2 where 128 copies
  // do, see plan_cold_rotation) and the sample is its time / k: no copy finds its
  // data cached, the fixed launch cost is paid once per graph, and outputs are
  // written back inside the window. A graph of N launches of ONE op would make launches 2..N hot. Any
  // other cold sample (or --cold-timing single) is ONE launch, however short.
  // Hot cache: short launches (< 20 us, measured once per op) are timed as one
  // launch of a CUDA graph of N back-to-back launches (N so the graph lasts
  // >= 200 us, at most 1000), and the sample is the graph's time / N. A hot
  // sample starts behind a 50 us hold kernel, so no launch latency is timed.
  Sample time(PreparedOp& op_in, const TimingOptions& opts) override {
    if (auto why = cannot_time()) throw std::logic_error("time: " + *why);
    auto& op = as_timed(op_in);
    if (!op.calibrated) calibrate(op);
    const auto alone = op.single_launch_only();
    if (!opts.cold_cache && op.short_launch && !op.graph_tried && !alone) capture_graph(op);
    const bool use_graph = !opts.cold_cache && op.short_launch && op.graph_;
    const bool want_rotation = opts.cold_cache && opts.cold_timing == ColdTiming::rotate && !alone;
    if (want_rotation && !op.rotation_tried) build_rotation(op);
    const bool rotate = want_rotation && op.rotation;
    if (opts.cold_cache)
      flush_l2();
    else
      hold();
    {
      auto range = nvtx_range(opts.range_name);
      PB_CUDA_CHECK(cudaEventRecord(start_, ctx_.stream));
      if (rotate)
        op.rotation->launch(ctx_.stream);
      else if (use_graph)
        PB_CUDA_CHECK(cudaGraphLaunch(op.graph_, ctx_.stream));
      else
        op.run();
      PB_CUDA_CHECK(cudaEventRecord(stop_, ctx_.stream));
    }
    PB_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    PB_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    Sample s;
    s.runs = rotate ? op.rotation->copies() : use_graph ? op.graph_runs : 1;
    s.seconds = static_cast<double>(ms) * 1e-3 / static_cast<double>(s.runs);
    s.method = rotate ? "rotating_graph" : use_graph ? "graph" : "single";
    if (rotate) s.rotating_bytes = op.rotating_bytes;
    if (alone && (opts.cold_cache || op.short_launch))
      s.why_single = *alone;
    else if (opts.cold_cache && !rotate)
      s.why_single = want_rotation ? op.rotation_why : "--cold-timing single";
    else if (!opts.cold_cache && op.short_launch && !use_graph)
      s.why_single = op.graph_problem;
    if (const auto mhz = sample_clocks()) s.sm_mhz = *mhz;  // outside the timed region
    return s;
  }

  void profile(PreparedOp& op_in, const std::string& range_name) override {
    auto& op = as_timed(op_in);
    // One untimed launch first, so module loading and first-touch costs stay
    // outside the captured region.
    op.run();
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    PB_CUDA_CHECK(cudaProfilerStart());
    {
      auto range = nvtx_range(range_name);
      op.run();
      PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    }
    PB_CUDA_CHECK(cudaProfilerStop());
  }

  nlohmann::json clocks() const override {
    nlohmann::json j = NvmlClocks::to_json(nvml_->read());
    if (clocks_seen_) {
      j["seen_since_start"] = {{"sm_mhz_min", sm_min_}, {"sm_mhz_max", sm_max_},
                               {"memory_mhz_min", mem_min_}, {"memory_mhz_max", mem_max_}};
    }
    return j;
  }

  std::optional<std::string> clocks_unavailable() const override {
    if (nvml_->available()) return std::nullopt;
    return nvml_->why_unavailable();
  }

  EnergyReading energy() override {
    EnergyReading r;
    r.ok = nvml_->read_energy(r.joules, r.error);
    return r;
  }
  std::string energy_source() const override {
    return "NVML nvmlDeviceGetTotalEnergyConsumption (the whole board, a millijoule counter the driver updates "
           "every few tens of ms)";
  }

  // The limiters' violation counters and NVML's clock samples around a group of
  // samples; the clocks read after each sample stand in when NVML took no clock
  // sample inside the group (it samples every ~10-100 ms).
  std::optional<std::string> cannot_count() const override {
#if PHASEBENCH_CUDA_EMU
    if (pb_emu::counters::available()) return std::nullopt;
    return pb_emu::counters::unavailable_reason();
#else
    return std::string(
        "counters come from the counting build of the CUDA emulation (phasebench-counters); on a GPU, Nsight "
        "Compute reads the same metrics (scripts/ncu-profile, scripts/gpu-check's ncu step)");
#endif
  }

  nlohmann::json count(PreparedOp& op_in) override {
    if (auto why = cannot_count()) throw std::logic_error("count: " + *why);
#if PHASEBENCH_CUDA_EMU
    auto& op = dynamic_cast<TimedOp&>(op_in);
    PB_CUDA_CHECK(cudaDeviceSynchronize());  // what verify() and the fills queued runs outside the window
    pb_emu::counters::begin();
    try {
      op.run();
      PB_CUDA_CHECK(cudaDeviceSynchronize());
    } catch (...) {
      pb_emu::counters::end();
      throw;
    }
    return counters_json(pb_emu::counters::end());
#else
    (void)op_in;
    return nullptr;
#endif
  }

  void begin_sample_group() override {
    group_ = Group{};
    group_.active = true;
    group_.t0 = std::chrono::steady_clock::now();
    if (!nvml_->available()) return;
    group_.violations = nvml_->read_violations();
    std::vector<double> ignored;
    group_.nvml_samples = nvml_->read_sm_clock_samples(0, ignored, group_.last_stamp_us);
  }

  std::optional<ThrottleWindow> end_sample_group() override {
    if (!group_.active || !nvml_->available()) return std::nullopt;
    group_.active = false;
    ThrottleWindow w;
    w.window_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - group_.t0).count();
    const auto after = nvml_->read_violations();
    if (group_.violations.ok && after.ok) {
      w.counters = true;
      for (const auto& [name, ns] : after.ns) {
        const auto it = group_.violations.ns.find(name);
        if (it != group_.violations.ns.end() && ns >= it->second) w.held_s[name] = static_cast<double>(ns - it->second) * 1e-9;
      }
    }
    std::vector<double> mhz;
    unsigned long long last = group_.last_stamp_us;
    if (group_.nvml_samples && nvml_->read_sm_clock_samples(group_.last_stamp_us, mhz, last) && !mhz.empty()) {
      w.sm_mhz_min = *std::min_element(mhz.begin(), mhz.end());
      w.sm_mhz_max = *std::max_element(mhz.begin(), mhz.end());
      w.clock_source = "nvml_samples";
    } else if (group_.after_samples > 0) {
      w.sm_mhz_min = group_.after_min;
      w.sm_mhz_max = group_.after_max;
      w.clock_source = "after_samples";
    }
    w.hard_reasons = group_.hard_reasons;
    return w;
  }

 private:
  static bool same_request(const OpRequest& a, const OpRequest& b) {
    return a.kind == b.kind && a.phase == b.phase && a.dtype == b.dtype && a.impl == b.impl && a.shape == b.shape &&
           a.options.same(b.options) && a.seed == b.seed && a.name == b.name;
  }

  TimedOp& as_timed(PreparedOp& op) {
    auto* t = dynamic_cast<TimedOp*>(&op);
    if (!t) throw InputError("CudaBackend: this operation was not prepared by the CUDA backend");
    return *t;
  }

  // The rotating copies of a cold short op (see time()); why not, when not.
  void build_rotation(TimedOp& op) {
    op.rotation_tried = true;
    if (op.single_seconds >= kRotateBelowSeconds) {
      op.rotation_why = "the launch lasts at least 100 us: its fixed launch cost is under 2% of it";
      return;
    }
    std::size_t free_bytes = 0, total_bytes = 0;
    PB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const auto plan = plan_cold_rotation(op.request.footprint_bytes(), facts_.l2_bytes, free_bytes);
    if (plan.copies < 2) {
      op.rotation_why = plan.why;
      return;
    }
    try {
      op.rotation = std::make_unique<RotatingGraph>(ctx_, op.request, op.inner(), plan.copies, op.checked);
      op.rotating_bytes = plan.bytes;
    } catch (const VerificationError&) {
      throw;  // a copy that computed something else than the verified op: an error, never a time
    } catch (const std::exception& e) {  // a capture or a copy's allocation that failed: single launches, and why
      cudaGetLastError();  // a failed allocation leaves a (non-sticky) error behind
      op.rotation.reset();
      op.rotation_why = e.what();
      std::fprintf(stderr, "phasebench: no rotating graph for this op, timing single cold launches: %s\n", e.what());
    }
  }

  // Warm-up, and whether one launch is short enough to need a graph (hot cache).
  void calibrate(TimedOp& op) {
    op.calibrated = true;
    op.run();
    op.run();
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      hold();
      PB_CUDA_CHECK(cudaEventRecord(start_, ctx_.stream));
      op.run();
      PB_CUDA_CHECK(cudaEventRecord(stop_, ctx_.stream));
      PB_CUDA_CHECK(cudaEventSynchronize(stop_));
      float ms = 0;
      PB_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      best = std::min(best, static_cast<double>(ms) * 1e-3);
    }
    op.single_seconds = best;
    op.short_launch = best < kShortLaunchSeconds;
    if (!op.short_launch) return;
    op.graph_runs = std::min<std::uint64_t>(
        kMaxGraphRuns, std::max<std::uint64_t>(2, static_cast<std::uint64_t>(std::ceil(kGraphSeconds / std::max(best, 1e-7)))));
  }

  // Capture graph_runs launches into a graph (hot samples of short ops only).
  // An op that cannot be captured is timed one launch at a time instead, and
  // says why on stderr once.
  void capture_graph(TimedOp& op) {
    op.graph_tried = true;
    const std::string problem = cuda::capture_graph(ctx_.stream, [&] {
      for (std::uint64_t i = 0; i < op.graph_runs; ++i) op.run();
    }, &op.graph_);
    if (!problem.empty()) {
      op.graph_problem = problem;
      op.graph_runs = 0;
      std::fprintf(stderr, "phasebench: no CUDA graph for this op, timing single launches: %s\n", problem.c_str());
      return;
    }
    PB_CUDA_CHECK(cudaGraphUpload(op.graph_, ctx_.stream));
    PB_CUDA_CHECK(cudaGraphLaunch(op.graph_, ctx_.stream));  // warm-up of the graph itself
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  }

  void flush_l2() { stream_read(flush_.get(), flush_.bytes(), sink_.as<unsigned>(), ctx_.sm_count, ctx_.stream); }

  // Keep the stream busy while the host queues what follows (see kHoldNanoseconds).
  void hold() {
    hold_kernel<<<1, 1, 0, ctx_.stream>>>(kHoldNanoseconds);
    PB_CUDA_CHECK_LAUNCH("hold_kernel");
  }

  // The clocks after a sample: the run's range and throttling; the SM clock for the clock-ratio check.
  std::optional<double> sample_clocks() {
    const auto r = nvml_->read();
    if (!r.ok) return std::nullopt;
    if (!clocks_seen_) {
      sm_min_ = sm_max_ = r.sm_mhz;
      mem_min_ = mem_max_ = r.memory_mhz;
      clocks_seen_ = true;
    }
    sm_min_ = std::min(sm_min_, r.sm_mhz);
    sm_max_ = std::max(sm_max_, r.sm_mhz);
    mem_min_ = std::min(mem_min_, r.memory_mhz);
    mem_max_ = std::max(mem_max_, r.memory_mhz);
    if (group_.active) {
      group_.after_min = group_.after_samples ? std::min(group_.after_min, static_cast<double>(r.sm_mhz)) : r.sm_mhz;
      group_.after_max = group_.after_samples ? std::max(group_.after_max, static_cast<double>(r.sm_mhz)) : r.sm_mhz;
      ++group_.after_samples;
      if (r.reasons_ok && NvmlClocks::is_throttling(r.reasons)) group_.hard_reasons = true;
    }
    return static_cast<double>(r.sm_mhz);
  }

  void read_device() {
    const int d = ctx_.device;
    cudaDeviceProp prop{};
    PB_CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
    info_.backend = "cuda";
    info_.name = prop.name;
    info_.slug = slug_of(info_.name);
    info_.memory_bytes = prop.totalGlobalMem;
    facts_.cc_major = ctx_.cc_major = attribute(cudaDevAttrComputeCapabilityMajor, d, "cudaDevAttrComputeCapabilityMajor");
    facts_.cc_minor = ctx_.cc_minor = attribute(cudaDevAttrComputeCapabilityMinor, d, "cudaDevAttrComputeCapabilityMinor");
    facts_.sm_count = ctx_.sm_count = attribute(cudaDevAttrMultiProcessorCount, d, "cudaDevAttrMultiProcessorCount");
    facts_.sm_clock_khz = attribute(cudaDevAttrClockRate, d, "cudaDevAttrClockRate");
    facts_.memory_clock_khz = attribute(cudaDevAttrMemoryClockRate, d, "cudaDevAttrMemoryClockRate");
    facts_.memory_bus_width_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, d, "cudaDevAttrGlobalMemoryBusWidth");
    facts_.l2_bytes = static_cast<std::uint64_t>(attribute(cudaDevAttrL2CacheSize, d, "cudaDevAttrL2CacheSize"));
    info_.cache_bytes = facts_.l2_bytes;
    char bus[32] = {};
    PB_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, d));
    pci_bus_id_ = bus;
    nvml_ = functional_emulation() ? NvmlClocks::unavailable("the functional CUDA emulation has no NVML device")
                                   : std::make_unique<NvmlClocks>(pci_bus_id_);
  }

  void describe_device() {
    const int d = ctx_.device;
    int driver = 0, runtime = 0, cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
    PB_CUDA_CHECK(cudaDriverGetVersion(&driver));
    PB_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    PB_CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &cublas_major));
    PB_CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &cublas_minor));
    PB_CUBLAS_CHECK(cublasGetProperty(PATCH_LEVEL, &cublas_patch));
    auto& j = info_.details;
    j["compute_capability"] = std::to_string(facts_.cc_major) + "." + std::to_string(facts_.cc_minor);
    j["architecture"] = architecture_of(facts_.cc_major, facts_.cc_minor);
    j["sm_count"] = facts_.sm_count;
    j["sm_clock_max_mhz"] = facts_.sm_clock_khz / 1000;
    j["memory_clock_max_mhz"] = facts_.memory_clock_khz / 1000;
    j["memory_bus_width_bits"] = facts_.memory_bus_width_bits;
    j["memory_bytes"] = info_.memory_bytes;
    j["l2_bytes"] = facts_.l2_bytes;
    j["ecc_enabled"] = attribute(cudaDevAttrEccEnabled, d, "cudaDevAttrEccEnabled") != 0;
    j["pci_bus_id"] = pci_bus_id_;
    j["driver_version"] = version_string(driver);
    j["runtime_version"] = version_string(runtime);
    j["cublas_version"] = std::to_string(cublas_major) + "." + std::to_string(cublas_minor) + "." +
                          std::to_string(cublas_patch);
    j["cublaslt_version"] = cublasLtGetVersion();
    j["cublaslt_workspace_bytes"] = kCublasLtWorkspaceBytes;
    all_ops();  // registers every implementation, and with them their libraries' versions
    for (const auto& [lib, version] : library_versions()) j["libraries"][lib] = version;
    j["clocks"] = nvml_->available() ? "NVML (libnvidia-ml.so.1)" : nvml_->why_unavailable();
    if (functional_emulation()) j["functional_emulation"] = kEmulationCannotTime;
#if PHASEBENCH_CUDA_EMU
    j["kernel_resources"] = pb_emu::resource_table_source();
    j["counting_build"] = pb_emu::counters::available();
#endif
    try {
      info_.spec = GpuTable::load().match_driver_name(info_.name);
    } catch (const std::exception& e) {
      j["spec_table_error"] = e.what();
    }
    if (info_.spec)
      j["spec"] = info_.spec->key;
    else
      j["spec"] = "unknown GPU: not in the spec table, no datasheet ceilings";
  }

  Context ctx_;
  DeviceInfo info_;
  DeviceFacts facts_;
  std::string pci_bus_id_;
  Ceilings measured_;
  bool bandwidth_measured_ = false;
  std::set<DType> gemm_tried_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  DeviceBuffer flush_, sink_;
  std::unique_ptr<NvmlClocks> nvml_;
  // The group of samples under way (begin_sample_group .. end_sample_group).
  struct Group {
    bool active = false;
    std::chrono::steady_clock::time_point t0;
    ViolationReading violations;
    bool nvml_samples = false;           // NVML's clock samples could be read at the start
    unsigned long long last_stamp_us = 0;  // the newest of them then
    std::size_t after_samples = 0;       // clocks read after samples, their range
    double after_min = 0, after_max = 0;
    bool hard_reasons = false;  // a hardware/thermal slowdown reason after some sample
  } group_;
  bool clocks_seen_ = false;
  unsigned sm_min_ = 0, sm_max_ = 0, mem_min_ = 0, mem_max_ = 0;
  // The last cannot_run(): its request and check, plan included, for the prepare() that follows.
  struct LastCheck {
    OpRequest request;
    CheckedRequest checked;
  };
  mutable std::optional<LastCheck> last_check_;
};

}  // namespace
}  // namespace cuda

bool cuda_backend_built() { return true; }

std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    if (why) *why = std::string("no CUDA device: cudaGetDeviceCount failed: ") + cudaGetErrorString(e);
    return nullptr;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device: cudaGetDeviceCount found none";
    return nullptr;
  }
  // One process: device 0 (CUDA_VISIBLE_DEVICES picks it). Ranks started by mpirun
  // or srun: the node's rank k takes device k, as engines and nccl-tests place them,
  // unless each rank sees one device only (srun --gpus-per-task=1, or a wrapper
  // setting CUDA_VISIBLE_DEVICES per rank): then that one.
  const int local = processes().local_rank();
  if (processes().size() > 1 && count > 1 && local >= count) {
    if (why)
      *why = "rank " + std::to_string(processes().rank()) + " is its node's rank " + std::to_string(local) +
             ", and the node shows " + std::to_string(count) + " CUDA device(s): start at most one rank a GPU";
    return nullptr;
  }
  const int device = processes().size() > 1 && count > 1 ? local : 0;
  try {
    auto b = std::make_unique<cuda::CudaBackend>(device);
    if (why)
      *why = "CUDA device " + std::to_string(device) + " of " + std::to_string(count) + ": " + b->device().name +
             " (compute capability " + b->device().details.at("compute_capability").get<std::string>() + ")" +
             (processes().size() > 1 ? ", rank " + std::to_string(processes().rank()) + " of " +
                                           std::to_string(processes().size())
                                     : std::string());
    return b;
  } catch (const std::exception& ex) {
    if (why) *why = std::string("a CUDA device is present but the CUDA backend could not start: ") + ex.what();
    return nullptr;
  }
}

}  // namespace phasebench
