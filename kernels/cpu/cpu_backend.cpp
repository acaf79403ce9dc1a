// The CPU backend: the device description, measured ceilings (the fastest of
// several streaming-read kernels and a copy well beyond the last-level cache, a
// large SGEMM), steady_clock timing
// with each op's own cache eviction for cold samples, and the operations the
// files of kernels/cpu/ register (cpu_op.hpp), looked up by kind.
#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "backend.hpp"
#include "cpu/cpu_op.hpp"
#include "cpu/powercap.hpp"
#include "cpu/read_kernels.hpp"
#include "cpu/simd.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/nvtx.hpp"

namespace phasebench {

namespace {

using cpu::fill;
using cpu::HostBuffer;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The last-level cache this CPU uses: the largest of cpu0's caches in sysfs.
// (glibc's _SC_LEVEL3_CACHE_SIZE, only the fallback, can report a whole
// package's L3 on AMD EPYC guests: 256 MiB where a core sees a 32 MiB slice.)
std::uint64_t read_sys_cache_bytes() {
  std::uint64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (!(f >> s) || s.empty()) continue;
    std::uint64_t v = std::strtoull(s.c_str(), nullptr, 10);
    if (s.back() == 'K') v *= 1024;
    if (s.back() == 'M') v *= 1024 * 1024;
    best = std::max(best, v);
  }
  if (best > 0) return best;
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<std::uint64_t>(l3) : 0;
}

std::string cpuinfo_field(const std::string& key) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) {
        auto v = line.substr(p + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  return {};
}

std::string slugify(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (std::isalnum(static_cast<unsigned char>(ch)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

// OpenBLAS declares cblas_sbgemm in its header even when the library was built
// without bf16 support, so look the symbol up at run time.
cpu::sbgemm_fn find_sbgemm() { return reinterpret_cast<cpu::sbgemm_fn>(dlsym(RTLD_DEFAULT, "cblas_sbgemm")); }

// --------------------------------------------------------------- backend ----
class CpuBackend final : public Backend {
 public:
  CpuBackend() {
    env_.sbgemm = find_sbgemm();
    cpu::register_all_ops(ops_);
    info_.backend = "cpu";
    info_.name = cpuinfo_field("model name");
    if (info_.name.empty()) info_.name = "unknown CPU";
    info_.slug = "cpu-" + slugify(info_.name);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    info_.memory_bytes = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
    info_.cache_bytes = read_sys_cache_bytes();
    const int threads = omp_get_max_threads();
    info_.details = {{"threads", threads},
                     {"logical_cpus", sysconf(_SC_NPROCESSORS_ONLN)},
                     {"last_level_cache_bytes", info_.cache_bytes},
                     {"memory_bytes", info_.memory_bytes},
                     {"openblas", openblas_get_config()},
                     {"openblas_threads", openblas_get_num_threads()},
                     {"bf16_gemm", env_.sbgemm ? "cblas_sbgemm" : "not available in this OpenBLAS"},
                     {"spec", "no datasheet table for CPUs: only theoretical and measured ceilings"}};
    // Theoretical fp32 peak: cores x clock x FLOPs/cycle of the widest FMA unit.
    const std::string flags = cpuinfo_field("flags");
    const double mhz = std::atof(cpuinfo_field("cpu MHz").c_str());
    int flops_per_cycle = 8;  // SSE: 4-wide mul + add
    std::string isa = "SSE (4-wide mul+add)";
    if (flags.find(" avx512f") != std::string::npos) {
      flops_per_cycle = 64;
      isa = "AVX-512 (2 x 16-wide FMA)";
    } else if (flags.find(" avx2") != std::string::npos && flags.find(" fma") != std::string::npos) {
      flops_per_cycle = 32;
      isa = "AVX2 (2 x 8-wide FMA)";
    }
    info_.details["isa"] = isa;
    info_.details["cpu_mhz"] = mhz;
    if (mhz > 0) {
      const double peak = threads * mhz * 1e6 * flops_per_cycle;
      const std::string m = std::to_string(threads) + " threads x " + std::to_string(static_cast<int>(mhz)) +
                            " MHz x " + std::to_string(flops_per_cycle) + " FLOP/cycle, " + isa;
      ceilings_.add_compute(DType::fp32, {peak, CeilingSource::theoretical, m});
      // Our CPU kernels widen 16-bit types to fp32 and run at the fp32 FMA rate.
      for (DType t : {DType::bf16, DType::fp16})
        ceilings_.add_compute(t, {peak, CeilingSource::theoretical, m + "; " + std::string(to_string(t)) + " widened to fp32"});
    }
  }

  const DeviceInfo& device() const override { return info_; }
  Ceilings ceilings() const override { return ceilings_; }

  void measure_ceilings(const std::vector<DType>& dtypes) override {
    if (measured_) return;
    measured_ = true;
    // Streaming read and copy over max(512 MiB, 8 x LLC).
    const std::uint64_t bytes = read_buffer_bytes();
    const std::uint64_t n = bytes / sizeof(float);
    HostBuffer a(bytes), b(bytes);
    fill(a, DType::fp32, n, 7);
    std::memset(b.get(), 0, bytes);
    const double read_bw = choose_read_kernel(a);
    double best_copy = 1e30;
    for (int rep = 0; rep < 6; ++rep) {
      auto t0 = Clock::now();
      const int T = omp_get_max_threads();
#pragma omp parallel num_threads(T)
      {
        const std::uint64_t per = (bytes / static_cast<std::uint64_t>(T) + 63) / 64 * 64;
        const std::uint64_t o = per * static_cast<std::uint64_t>(omp_get_thread_num());
        if (o < bytes) std::memcpy(b.as<char>() + o, a.as<char>() + o, std::min(per, bytes - o));
      }
      best_copy = std::min(best_copy, seconds_since(t0));
    }
    const std::string size = std::to_string(bytes >> 20) + " MiB";
    ceilings_.add_bandwidth({read_bw, CeilingSource::measured, read_method(size)});
    ceilings_.add_bandwidth({2.0 * static_cast<double>(bytes) / best_copy, CeilingSource::measured,
                             "memcpy of " + size + " (bytes read + written), best of 6"});
    measure_cache_bandwidth();
    // SGEMM: 2048^3 (about 17 GFLOP), best of 3 after a warm-up.
    const blasint G = 2048;
    HostBuffer x(G * G * 4), w(G * G * 4), y(G * G * 4);
    fill(x, DType::fp32, G * G, 8);
    fill(w, DType::fp32, G * G, 9);
    double best_gemm = 1e30;
    for (int rep = 0; rep < 7; ++rep) {
      auto t0 = Clock::now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, G, G, G, 1.0f, x.as<float>(), G, w.as<float>(), G, 0.0f,
                  y.as<float>(), G);
      if (rep > 0) best_gemm = std::min(best_gemm, seconds_since(t0));
    }
    const double sgemm = 2.0 * G * G * G / best_gemm;
    ceilings_.add_compute(DType::fp32, {sgemm, CeilingSource::measured, "OpenBLAS sgemm 2048^3, best of 6"});
    for (DType t : dtypes) {
      if (t == DType::bf16 || t == DType::fp16)
        ceilings_.add_compute(t, {sgemm, CeilingSource::measured,
                                  "OpenBLAS sgemm 2048^3: the CPU backend computes " + std::string(to_string(t)) +
                                      " operations in fp32"});
    }
  }

  std::optional<double> paired_read() override {
    // Reads of 4 x LLC (at least 128 MiB: a few ms) taken in turn from a ring
    // of four, so each read finds none of its data in the caches (reading the
    // same 4 x LLC again found part of it in the L3 and measured up to 20% high).
    // Kept from the first call on; filled, so the reads touch real pages.
    const std::uint64_t chunk = std::max<std::uint64_t>(128ull << 20, kBeyondCachesFactor * info_.cache_bytes);
    if (!pair_buf_.get()) {
      pair_buf_ = HostBuffer(4 * chunk);
      fill(pair_buf_, DType::fp32, pair_buf_.bytes() / 4, 5);
    }
    const auto* p = pair_buf_.as<unsigned char>() + (pair_next_++ % 4) * chunk;
    return read_bandwidth(reinterpret_cast<const std::uint64_t*>(p), chunk, 1, *read_kernel_);
  }

  std::string paired_read_method() const override {
    return "the read kernel that set the measured ceiling (" + read_kernel_->name() + ")";
  }

  std::optional<std::string> clocks_unavailable() const override {
    return std::string("the CPU backend reads no clocks (no clock-ratio check)");
  }
  EnergyReading energy() override {
    EnergyReading r;
    r.ok = powercap_.read(r.joules, r.error);
    return r;
  }
  std::string energy_source() const override { return powercap_.describe(); }

  std::optional<double> remeasure_read_bandwidth() override {
    if (!measured_) return std::nullopt;
    HostBuffer a(read_buffer_bytes());
    fill(a, DType::fp32, a.bytes() / 4, 7);
    return read_bandwidth(a, 12, *read_kernel_);
  }

  bool implements(std::string_view kind, DType t, Impl impl) const override {
    const auto* i = ops_.find(kind, impl);
    return i && i->dtypes(t, env_);
  }

  bool applies(const OpRequest& r) const override {
    const auto* i = ops_.find(r, env_);
    return i && (!i->applies || i->applies(r));
  }

  std::optional<std::string> cannot_run(const OpRequest& r) const override {
    const auto* i = ops_.find(r, env_);
    if (!i)
      return "the CPU backend has no " + std::string(to_string(r.impl)) + " " + r.kind + " for " +
             std::string(to_string(r.dtype));
    if (i->unsupported)
      if (auto why = i->unsupported(r, env_)) return why;
    std::uint64_t need = 0;
    try {
      need = add(r.footprint_bytes(), i->scratch_bytes ? i->scratch_bytes(r, env_) : 0, "memory");
    } catch (const std::exception& e) {
      return std::string("size: ") + e.what();
    }
    const long avail_pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double avail = static_cast<double>(avail_pages) * static_cast<double>(page);
    if (static_cast<double>(need) > 0.8 * avail)
      return "needs " + fmt_gib(static_cast<double>(need)) + " of memory, " + fmt_gib(avail) +
             " available; choose a smaller batch or length";
    return std::nullopt;
  }

  std::unique_ptr<PreparedOp> prepare(const OpRequest& r) override {
    if (auto why = cannot_run(r)) throw Unsupported(*why);
    return ops_.find(r, env_)->prepare(env_, r);
  }

  Sample time(PreparedOp& op, const TimingOptions& opts) override {
    auto* cop = dynamic_cast<cpu::CpuOp*>(&op);
    // Cold cache: the op's own data leaves the caches before the sample, unless
    // its footprint exceeds 2 x LLC (then what the previous run left cached is
    // its tail, and the op starts from its head: it streams from memory anyway).
    if (opts.cold_cache) {
      if (cop && cop->footprint() < flush_bytes())
        cop->evict();
      else if (!cop)
        flush();
    }
    auto range = nvtx_range(opts.range_name);
    const auto t0 = Clock::now();
    op.run();
    Sample s;
    s.seconds = seconds_since(t0);
    return s;
  }

  void synchronize() override {}  // run() returns when the work is done

  void profile(PreparedOp& op, const std::string& range_name) override {
    auto range = nvtx_range(range_name);
    op.run();
  }

 private:
  // The last-level cache's read bandwidth: the same read over half of it, hot
  // (read once first), best of 20.
  void measure_cache_bandwidth() {
    if (info_.cache_bytes < (1u << 20)) return;
    const std::uint64_t bytes = info_.cache_bytes / 2 / 64 * 64;
    HostBuffer a(bytes);
    fill(a, DType::fp32, bytes / 4, 3);
    read_bandwidth(a, 2, *read_kernel_);
    const double bw = read_bandwidth(a, 20, *read_kernel_);
    ceilings_.add_cache_bandwidth({"LLC", {bw, CeilingSource::measured,
                                           "streaming read (all threads; " + read_kernel_->name() + ") of " +
                                               std::to_string(bytes >> 20) +
                                               " MiB, half the last-level cache, hot; best of 20"}});
  }

  std::uint64_t read_buffer_bytes() const { return std::max<std::uint64_t>(512ull << 20, 8 * info_.cache_bytes); }

  // Every read kernel (read_kernels.hpp) over `a`, in interleaved rounds so that a
  // shared machine's moves hit them alike: the fastest sets the read ceiling and is
  // the read every paired read and the re-measurement use (a ceiling a kernel of
  // the sweep can beat is not a ceiling). Records each kernel's best in the
  // device details; returns the winner's bytes/s.
  double choose_read_kernel(const HostBuffer& a) {
    const auto& ks = cpu::read::kernels();
    std::vector<double> best(ks.size(), 0.0);
    for (int round = 0; round < kReadRounds; ++round)
      for (std::size_t k = 0; k < ks.size(); ++k) best[k] = std::max(best[k], read_bandwidth(a, 1, ks[k]));
    const auto win = static_cast<std::size_t>(std::max_element(best.begin(), best.end()) - best.begin());
    read_kernel_ = &ks[win];
    nlohmann::json tried = nlohmann::json::array();
    for (std::size_t k = 0; k < ks.size(); ++k) tried.push_back({{"kernel", ks[k].name()}, {"bytes_per_s", best[k]}});
    info_.details["read_kernels"] = {
        {"winner", ks[win].name()},
        {"rounds", kReadRounds},
        {"buffer_bytes", a.bytes()},
        {"measured", tried},
        {"why", "the read ceiling is the fastest of these streaming reads (XOR reductions by all threads, each "
                "kernel's best over the rounds, kernels interleaved); paired reads and the re-measurement use the "
                "winner"}};
    return best[win];
  }

  std::string read_method(const std::string& size) const {
    return "streaming read (XOR reduction, all threads) of " + size + ": the fastest of " +
           std::to_string(cpu::read::kernels().size()) + " read kernels, best of " + std::to_string(kReadRounds) +
           " rounds each: " + read_kernel_->name();
  }

  // Streaming read of `buf` by all threads with `kernel` (read_kernels.hpp):
  // bytes/s, best of `reps` (this machine may be shared).
  static double read_bandwidth(const HostBuffer& buf, int reps, const cpu::read::Kernel& kernel) {
    return read_bandwidth(buf.as<std::uint64_t>(), buf.bytes(), reps, kernel);
  }
  static double read_bandwidth(const std::uint64_t* p, std::uint64_t bytes, int reps, const cpu::read::Kernel& kernel) {
    double best = 1e30;
    volatile std::uint64_t sink = 0;
    const std::uint64_t words = bytes / 8;
    for (int rep = 0; rep < reps; ++rep) {
      auto t0 = Clock::now();
      const std::uint64_t x = cpu::read::read_all(kernel, p, words);
      best = std::min(best, seconds_since(t0));
      sink = sink ^ x;
    }
    return static_cast<double>(bytes) / best;
  }

  static std::string fmt_gib(double b) {
    std::ostringstream os;
    os.precision(3);
    os << b / (1024.0 * 1024 * 1024) << " GiB";
    return os.str();
  }
  std::uint64_t flush_bytes() const { return info_.cache_bytes ? 2 * info_.cache_bytes : (256ull << 20); }
  // For ops of another kind: evict by reading a buffer of 2 x LLC (reading leaves
  // clean lines, so the timed op does not pay for writing back the flush's data).
  void flush() {
    if (!flush_.get()) {
      flush_ = HostBuffer(flush_bytes());
      std::memset(flush_.get(), 1, flush_.bytes());
    }
    const std::int64_t n = static_cast<std::int64_t>(flush_.bytes() / 8);
    const auto* p = flush_.as<std::uint64_t>();
    std::uint64_t sum = 0;
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) sum += p[i];
    flush_sink_ = flush_sink_ + sum;
  }

  DeviceInfo info_;
  Ceilings ceilings_;
  bool measured_ = false;
  cpu::CpuEnv env_;
  cpu::CpuOps ops_;
  HostBuffer flush_;
  HostBuffer pair_buf_;  // paired_read()
  // The read kernel of the read ceiling (measure_ceilings() chooses it; before, the first).
  static constexpr int kReadRounds = 6;
  const cpu::read::Kernel* read_kernel_ = &cpu::read::kernels().front();
  // RAPL through powercap; PHASEBENCH_POWERCAP_ROOT points it at another tree (tests).
  cpu::PowercapEnergy powercap_{std::getenv("PHASEBENCH_POWERCAP_ROOT") ? std::getenv("PHASEBENCH_POWERCAP_ROOT")
                                                                        : "/sys/class/powercap"};
  std::uint64_t pair_next_ = 0;
  volatile std::uint64_t flush_sink_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace phasebench
