// The summary a run ends with (and `phasebench summary FILE` prints): a warning
// when the machine was busy, fraction of roofline per phase, op and
// implementation (ours and the vendor library's apart), ours vs the libraries on
// the same points (versus.cpp), then each section the operations declare
// (phasebench/report.hpp, in their order), how the points stopped sampling, and
// energy. Nothing here is about one operation.
#include "summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "machine_load.hpp"
#include "standing.hpp"
#include "fixture.hpp"
#include "phasebench/op.hpp"
#include "phasebench/report.hpp"
#include "phasebench/roofline.hpp"
#include "versus.hpp"

namespace phasebench {

namespace {

// What the summary reads off the standing entry of each point.
struct Group {
  bool link_bound = false;  // PointReport::roofline_bound false: no fraction of the roofline
  std::size_t link_points = 0;  // its measured points
  std::vector<double> fractions;
  std::vector<double> paired;  // points' median fraction of the paired reads' bandwidth (suspect ones left out)
  std::size_t suspect = 0;     // points whose paired fraction is above kPairedSuspectAbove
  std::size_t skipped = 0, errors = 0;
};
// A row of the tables: phase, op and implementation (our kernel and the vendor
// library's are different rows: one median over both would describe neither).
using RowKey = std::tuple<std::string, std::string, std::string>;
RowKey row_key(const nlohmann::json& p) {
  const auto impl = p.value("impl", "");
  return {p.value("phase", ""), p.value("op", ""), impl.empty() ? "-" : impl};
}

struct Collected {
  std::map<RowKey, Group> groups;  // (phase, op, impl) -> its points
  std::string ceiling_source;
  // Points above their roofline: name, fraction, likely cause (fixture.cpp).
  std::vector<std::tuple<std::string, double, std::string>> above;
  // The stopping rule's outcome: points timed, how many of those did not
  // converge; samples set aside for a low SM clock, and in how many points.
  std::size_t timed = 0, not_converged = 0, rejected = 0, rejected_points = 0;
  // How points were timed (time.method) and the copies of rotating graphs; the
  // points flagged throttled (clocks held down by a limiter).
  std::map<std::string, std::size_t> methods;
  std::uint64_t copies_min = 0, copies_max = 0;
  std::size_t throttled = 0;
  // Energy per (phase, op): watts, J per token (a point that stands for several
  // per model step, as its operation's point report says: times those), and J
  // per byte of memory-bound decode points.
  struct EnergyGroup {
    std::vector<double> watts, joules_per_token, joules_per_byte;
  };
  std::map<RowKey, EnergyGroup> energy;
};

void collect_measurement(const nlohmann::json& p, Collected& c) {
  if (!p.contains("time")) return;
  ++c.timed;
  if (p.at("time").value("converged", nlohmann::json()) == false) ++c.not_converged;
  // Files before time.method: several runs per sample were a hot graph.
  const std::string method = p.at("time").value(
      "method", p.at("time").value("runs_per_sample", std::uint64_t{1}) > 1 ? "graph" : "single");
  if (method == "rotating_graph") {
    const auto k = p.at("time").value("rotating_copies", std::uint64_t{0});
    c.copies_min = c.methods[method] ? std::min(c.copies_min, k) : k;
    c.copies_max = std::max(c.copies_max, k);
  }
  ++c.methods[method];
  if (p.value("throttled", false)) ++c.throttled;
  if (p.contains("clock_check")) {
    const auto n = p.at("clock_check").value("rejected_samples", std::uint64_t{0});
    c.rejected += n;
    c.rejected_points += n > 0;
  }
  if (!p.contains("energy") || !p.at("energy").contains("joules_per_run")) return;
  const auto& e = p.at("energy");
  auto& g = c.energy[row_key(p)];
  g.watts.push_back(e.value("watts", 0.0));
  if (e.value("joules_per_token", nlohmann::json()).is_number()) {
    const auto* report = OpRegistry::get().point_report(p.value("op_kind", ""));
    const double per_step = report && report->per_step ? report->per_step(p) : 1.0;
    g.joules_per_token.push_back(e.at("joules_per_token").get<double>() * std::max(1.0, per_step));
  }
  if (p.value("phase", "") == "decode" && p.value("bound", "") == "memory" && e.value("joules_per_byte", nlohmann::json()).is_number())
    g.joules_per_byte.push_back(e.at("joules_per_byte").get<double>());
}

// Whether the roofline bounds operation `kind` (PointReport::roofline_bound; a kind
// without a point report: yes).
bool roofline_bound(const std::string& kind) {
  const auto& reg = OpRegistry::get();
  const auto* report = reg.point_report(reg.current_kind(kind));
  return !report || report->roofline_bound;
}

Collected collect(const Standing& standing) {
  Collected c;
  for (const auto* entry : standing) {
    const auto& b = *entry;
    const auto& p = b.at("phasebench");
    auto& g = c.groups[row_key(p)];
    const auto status = p.value("status", "");
    if (status == "skipped") ++g.skipped;
    if (status == "error") ++g.errors;
    if (status == "ok") collect_measurement(p, c);
    if (status != "ok" || !p.contains("roofline") || !p.at("roofline").is_object()) continue;
    if (!roofline_bound(p.value("op_kind", ""))) {
      g.link_bound = true;
      ++g.link_points;
      continue;
    }
    const auto& r = p.at("roofline");
    if (r.contains("fraction_of_roofline") && r.at("fraction_of_roofline").is_number())
      g.fractions.push_back(r.at("fraction_of_roofline").get<double>());
    if (p.contains("paired_read") && p.at("paired_read").value("fraction_median", nlohmann::json()).is_number()) {
      const double f = p.at("paired_read").at("fraction_median").get<double>();
      if (f > kPairedSuspectAbove)
        ++g.suspect;
      else
        g.paired.push_back(f);
    }
    c.ceiling_source = r.value("bandwidth_ceiling_source", "");
    if (p.contains("above_roofline"))
      c.above.emplace_back(b.value("name", ""), p.at("above_roofline").value("fraction", 0.0),
                           p.at("above_roofline").value("likely_cause", ""));
  }
  return c;
}

// The read bandwidth measured again after the sweep (commands.cpp): say when it
// moved enough to matter for the fractions.
std::string bandwidth_note(const nlohmann::json& pb) {
  if (!pb.contains("bandwidth_check") || !pb.at("bandwidth_check").is_object()) return "";
  const auto& c = pb.at("bandwidth_check");
  const double a = c.value("start_bytes_per_s", 0.0), b = c.value("end_bytes_per_s", 0.0);
  if (!(a > 0 && b > 0 && std::abs(b / a - 1.0) > 0.10)) return "";
  return fmt::format(
      "  note: the measured read bandwidth was {:.1f} GB/s before the sweep and {:.1f} GB/s after it ({:+.0f}%):\n"
      "  the machine's bandwidth moved while it ran, and memory-bound fractions are uncertain by about that much.\n",
      a / 1e9, b / 1e9, 100 * (b / a - 1.0));
}

// Per phase, op and implementation: points, best and median fraction of
// roofline, skipped, errors, and the paired reads' fraction where any point has one.
std::string fraction_table(const Collected& c) {
  const bool any_paired =
      std::any_of(c.groups.begin(), c.groups.end(), [](const auto& kv) { return !kv.second.paired.empty() || kv.second.suspect; });
  auto paired_cell = [&](const Group& g) {
    if (!any_paired) return std::string();
    if (g.paired.empty()) return fmt::format(" {:>8}", "-");
    return fmt::format(" {:>7.1f}% ({})", 100 * median_of(g.paired), g.paired.size());
  };
  std::size_t w = 18, wi = 4;  // the op column: as wide as the longest op (latent_attention_paged)
  for (const auto& kv : c.groups) {
    w = std::max(w, std::get<1>(kv.first).size());
    wi = std::max(wi, std::get<2>(kv.first).size());
  }
  std::string out = fmt::format("  {:<8} {:<{}} {:<{}} {:>6} {:>8} {:>8} {:>8} {:>7}{}\n", "phase", "op", w, "impl", wi,
                                "points", "best", "median", "skipped", "errors",
                                any_paired ? fmt::format(" {:>8}", "paired") : "");
  for (const auto& [k, g] : c.groups) {
    const auto& [phase, op, impl] = k;
    if (g.fractions.empty()) {
      const char* none = g.link_bound ? "link" : "-";
      out += fmt::format("  {:<8} {:<{}} {:<{}} {:>6} {:>8} {:>8} {:>8} {:>7}{}\n", phase, op, w, impl, wi, g.link_points,
                         none, none, g.skipped, g.errors, paired_cell(g));
      continue;
    }
    out += fmt::format("  {:<8} {:<{}} {:<{}} {:>6} {:>7.1f}% {:>7.1f}% {:>8} {:>7}{}\n", phase, op, w, impl, wi,
                       g.fractions.size(), 100 * *std::max_element(g.fractions.begin(), g.fractions.end()),
                       100 * median_of(g.fractions), g.skipped, g.errors, paired_cell(g));
  }
  if (std::any_of(c.groups.begin(), c.groups.end(), [](const auto& kv) { return kv.second.link_bound; }))
    out += "  link: an operation a link bounds, not the roofline: its own section below holds it against its link\n";
  if (any_paired)
    out += "  paired: median over the memory-bound points beyond the caches (their number in brackets) of each\n"
           "  point's median fraction of the streaming read timed right before each of its samples\n";
  for (const auto& [k, g] : c.groups)
    if (g.suspect)
      out += fmt::format("  note: {} {} {}: {} point(s) above {:.0f}% of their paired read, left out as suspect "
                         "(paired_read.why_suspect)\n",
                         std::get<0>(k), std::get<1>(k), std::get<2>(k), g.suspect, 100 * kPairedSuspectAbove);
  if (!c.above.empty()) {
    // Above 100% is not a fast kernel but a ceiling or cache effect: say which.
    out += fmt::format("  note: {} point(s) above 100% of their roofline; each carries above_roofline.likely_cause:\n",
                       c.above.size());
    std::map<std::string, std::size_t> by_cause;
    for (const auto& [name, f, cause] : c.above) ++by_cause[cause];
    for (const auto& [cause, n] : by_cause) out += fmt::format("    {} x {}\n", n, cause);
  }
  return out;
}

}  // namespace

// How the points stopped sampling, and the samples set aside for a low clock.
std::string measurement_section(const Collected& c, const nlohmann::json& pb) {
  if (c.timed == 0) return "";
  std::string out;
  const auto stop = pb.value("stopping", nlohmann::json::object());
  if (stop.value("rule", "") == "noise")
    out += fmt::format("\nsampling: {} of {} points converged (noise at most {:.2g}% within {:g} s per point)", c.timed - c.not_converged,
                       c.timed, 100 * stop.value("max_noise", 0.0), stop.value("max_time_s", 0.0));
  if (c.not_converged)
    out += fmt::format("; {} did not: their medians rest on noisier samples (time.noise in the results)", c.not_converged);
  if (!out.empty()) out += "\n";
  if (c.methods.count("rotating_graph") || c.methods.count("graph")) {
    std::string parts;
    for (const auto& [m, n] : c.methods) {
      parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", n, m);
      if (m == "rotating_graph") parts += fmt::format(" ({}-{} copies, time / copies)", c.copies_min, c.copies_max);
    }
    out += "timing: " + parts + " (time.method in the results)\n";
  }
  if (c.throttled)
    out += fmt::format("throttled: {} points ran with clocks a limiter held down (their throttle block says which and how far)\n",
                       c.throttled);
  if (c.rejected)
    out += fmt::format("clocks: {} samples in {} points set aside for an SM clock below {:.0f}% of the run's highest\n",
                       c.rejected, c.rejected_points, 100 * pb.value("clock_check", nlohmann::json::object()).value("ratio", 0.0));
  return out;
}

// Energy per phase and op, or one line saying why there is none.
std::string energy_section(const Collected& c, const nlohmann::json& pb) {
  if (c.timed == 0) return "";
  const auto e = pb.value("energy", nlohmann::json::object());
  if (!e.value("available", false))
    return e.contains("why") ? "energy: " + e.at("why").get<std::string>() + "\n" : std::string();
  if (c.energy.empty()) return "energy: no point has a reading (see each point's energy.error)\n";
  std::string out = fmt::format("\nenergy ({}; medians over the points; layer points x the model's layers)\n", e.value("source", ""));
  out += fmt::format("  {:<8} {:<18} {:<4} {:>7} {:>9} {:>12} {:>14}\n", "phase", "op", "impl", "points", "watts", "J/token",
                     "pJ/B (memory)");
  auto med = [](const std::vector<double>& v, const char* f) { return v.empty() ? std::string("-") : fmt::format(fmt::runtime(f), median_of(v)); };
  for (const auto& [key, g] : c.energy)
    out += fmt::format("  {:<8} {:<18} {:<4} {:>7} {:>9} {:>12} {:>14}\n", std::get<0>(key), std::get<1>(key),
                       std::get<2>(key), g.watts.size(), med(g.watts, "{:.0f}"),
                       med(g.joules_per_token, "{:.3g}"),
                       g.joules_per_byte.empty() ? std::string("-") : fmt::format("{:.1f}", median_of(g.joules_per_byte) * 1e12));
  return out;
}

std::string summarize(const nlohmann::json& results) {
  const Standing standing = standing_points(results);
  const Collected c = collect(standing);
  const auto pb = run_context(results);
  std::string out = fmt::format("\nphasebench summary: fraction of roofline ({} ceilings)\n",
                                c.ceiling_source.empty() ? "no" : c.ceiling_source);
  if (pb.value("complete", true) == false)
    out += fmt::format("note: the run did not finish (interrupted, or still running): this covers the {} point(s) it "
                       "finished\n",
                       standing.size());
  if (const auto w = pb.value("warnings", nlohmann::json::array()); w.is_array())
    for (const auto& x : w)
      if (x.is_string()) out += "WARNING: " + x.get<std::string>() + "\n";
  out += load_warning(pb);
  out += bandwidth_note(pb);
  out += fraction_table(c);
  out += versus_libraries(standing);
  // The operations' sections; a record the file holds is read, else computed
  // (files written before it).
  const auto& reg = OpRegistry::get();
  const SummaryInput in{standing, pb, [&](const std::string& key) {
                          if (pb.contains(key)) return pb.at(key);
                          for (const auto& r : reg.records())
                            if (r.key == key) return r.make(standing, pb);
                          return nlohmann::json::array();
                        }};
  for (const auto& section : reg.sections()) out += section.text(in);
  out += measurement_section(c, pb);
  out += energy_section(c, pb);
  return out;
}

}  // namespace phasebench
