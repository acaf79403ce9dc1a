// `phasebench counters` (counters.hpp): verify, count one run, estimate, report.
#include "counters.hpp"

#include <fmt/format.h>

#include <chrono>

#include "fixture.hpp"
#include "phasebench/error.hpp"
#include "phasebench/speed_of_light.hpp"

namespace phasebench {

namespace {

struct TargetMap {
  const char* gpu;
  const char* target;
};
constexpr TargetMap kTargets[] = {{"h200-sxm", "h200"}, {"h100-sxm", "h100"}, {"a100-sxm4-80gb", "a100"},
                                   {"b200-sxm", "b200"}, {"rtx-pro-6000-bse", "rtxpro6000"}};

std::string mb(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.2f} MB", bytes / 1e6);
  return fmt::format("{:.1f} kB", bytes / 1e3);
}

std::string kib(double bytes) { return fmt::format("{:.1f} KiB", bytes / 1024.0); }

std::string pct(double f) { return fmt::format("{:.1f}%", 100.0 * f); }

std::string duration(double s) {
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.2f} us", s * 1e6);
}

void print_point(std::ostream& out, const Point& p, const SolEstimate& e) {
  out << p.name << "\n";
  std::size_t kernels = 0;
  for (const auto& L : e.launches) kernels += L.kind == "kernel" ? 1 : 0;
  // The excess is over the op's formula bytes, which include a library call's: only a
  // complete count has one.
  const std::string counted = fmt::format(
      "counted DRAM {}{}{}  sectors/request {:.2f} (ideal {:.2f}, {} efficient)  bank conflicts {}",
      mb(static_cast<double>(e.dram_bytes)), e.complete ? fmt::format(" ({:+.1f}%)", 100.0 * e.excess) : std::string(),
      e.l2_read_bytes ? fmt::format(", {} more read back from L2", mb(static_cast<double>(e.l2_read_bytes))) : std::string(),
      e.sectors_per_request, e.ideal_sectors_per_request, pct(e.sector_efficiency), e.bank_conflicts);
  if (e.complete)
    out << fmt::format("  formula {}  {}\n", mb(static_cast<double>(e.formula_bytes)), counted);
  else if (kernels == 0)
    out << fmt::format("  formula {}  nothing counted: every launch is a library call\n",
                       mb(static_cast<double>(e.formula_bytes)));
  else
    out << fmt::format("  formula {} (library calls included)  our kernels alone: {}\n",
                       mb(static_cast<double>(e.formula_bytes)), counted);
  if (!e.complete) {
    out << "  estimate: n/a (the op's library calls are emulated by a reference GEMM and not counted)\n";
  } else {
    const bool compute = e.bound == "compute";
    const double measured = compute ? e.fraction_of_measured_peak : e.fraction_of_measured_bandwidth;
    const std::string est =
        fmt::format("{} of {}{}", pct(e.estimated_fraction), compute ? "the dense tensor peak" : "HBM bandwidth",
                    measured > 0 ? fmt::format(" ({} of the measured {})", pct(measured), compute ? "bf16 GEMM" : "copy")
                                 : std::string());
    out << fmt::format("  occupancy {}  waves {:.2f} (last {})  in flight {}/SM (Little's law needs {})  -> estimate {}, "
                       "{} bound, at least {}\n",
                       pct(e.occupancy), e.waves, pct(e.last_wave_fill), kib(e.inflight_per_sm), kib(e.needed_per_sm),
                       est, e.bound, duration(e.time_s));
  }
  for (const auto& L : e.launches) {
    if (L.kind != "kernel") {
      out << fmt::format("    {:<44} {}  {}\n", L.kernel.substr(0, 44), L.kind,
                         L.kind == "library" ? "not counted" : mb(static_cast<double>(L.dram_bytes)));
      continue;
    }
    out << fmt::format("    {:<44} {} blocks x {}  {} regs  {}/SM ({})  waves {:.2f}  DRAM {}  sectors {}  conflicts {}  "
                       "in flight {}/SM  {} {}\n",
                       L.short_name.substr(0, 44), L.blocks, L.threads_per_block,
                       L.registers_known ? std::to_string(L.registers) : std::string("?"), L.blocks_per_sm,
                       L.occupancy_limiter, L.waves, mb(static_cast<double>(L.dram_bytes)), pct(L.sector_efficiency),
                       L.bank_conflicts, kib(L.inflight_per_sm), L.bound, duration(L.t));
  }
  for (const auto& n : e.notes) out << "  note: " << n << "\n";
}

}  // namespace

std::optional<std::string> emulated_target_for(const std::string& gpu_key) {
  for (const auto& t : kTargets)
    if (gpu_key == t.gpu) return std::string(t.target);
  return std::nullopt;
}

std::string counted_gpus() {
  std::string s;
  for (const auto& t : kTargets) s += (s.empty() ? "" : ", ") + std::string(t.gpu);
  return s;
}

CountersTally count_points(Backend& backend, const std::vector<const Point*>& points, const GpuSpec& gpu,
                           ResultsFile& file, std::ostream& out, std::ostream& progress) {
  CountersTally tally;
  const auto t0 = std::chrono::steady_clock::now();
  out << "Counted by the functional CUDA emulation's counting build and estimated for " << gpu.name
      << ": counts and a speed-of-light model, never a measurement (docs/design.md, \"Counters\").\n\n";
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Point& p = *points[i];
    nlohmann::json entry;
    entry["name"] = p.name;
    entry["run_name"] = p.name;
    entry["run_type"] = "counters";
    nlohmann::json pb = point_identity_json(p);
    const auto ts = std::chrono::steady_clock::now();
    try {
      if (!p.invalid.empty()) throw Unsupported(p.invalid);
      if (auto why = backend.cannot_run(p.request)) throw Unsupported(*why);
      auto op = backend.prepare(p.request);
      op->verify();  // a wrong result is an error, never counted
      const nlohmann::json launches = backend.count(*op);
      const SolEstimate e = estimate_speed_of_light(launches, p.cost, p.request.dtype, gpu);
      pb["status"] = "ok";
      pb["counters"] = launches;
      pb["estimate"] = to_json(e);
      print_point(out, p, e);
      ++tally.ok;
    } catch (const Unsupported& e) {
      pb["status"] = "skipped";
      pb["message"] = e.what();
      out << p.name << "\n  skipped: " << e.what() << "\n";
      ++tally.skipped;
    } catch (const std::exception& e) {
      pb["status"] = "error";
      pb["message"] = e.what();
      out << p.name << "\n  ERROR: " << e.what() << "\n";
      ++tally.errors;
    }
    entry["phasebench"] = std::move(pb);
    file.add(std::move(entry));
    file.write();
    out << std::flush;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count();
    const double all = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    progress << fmt::format("phasebench: counted {}/{} ({:.1f} s; {})\n", i + 1, points.size(), s,
                            progress_line(i + 1, points.size(), all))
             << std::flush;
  }
  return tally;
}

}  // namespace phasebench
