#include "summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "phasebench/roofline.hpp"
#include "phasebench/workload.hpp"

namespace phasebench {

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Smallest M at which a linear layer N x K reaches the ridge (intensity >= P/W).
std::uint64_t predicted_crossing(std::uint64_t N, std::uint64_t K, std::uint64_t e, double ridge) {
  auto intensity = [&](std::uint64_t M) { return linear_cost({M, N, K}, e, e).intensity(); };
  std::uint64_t lo = 1, hi = 1;
  while (intensity(hi) < ridge) {
    if (hi >= (1ull << 24)) return 0;  // never within reason
    hi *= 2;
  }
  if (hi == 1) return 1;
  lo = hi / 2;
  while (hi - lo > 1) {
    const auto mid = lo + (hi - lo) / 2;
    (intensity(mid) >= ridge ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace

std::string summarize(const nlohmann::json& results) {
  struct Group {
    std::vector<double> fractions;
    std::vector<double> paired;  // points' median fraction of the paired reads' bandwidth
    std::size_t skipped = 0, errors = 0;
  };
  std::map<std::pair<std::string, std::string>, Group> groups;
  struct GemvPoint {
    std::uint64_t batch, N, K, e;
    double time, flops_per_s, bytes_per_s, ridge;
  };
  std::map<std::string, std::map<std::uint64_t, GemvPoint>> gemv;  // key -> batch -> fastest point
  std::string ceiling_source;
  std::vector<nlohmann::json> layers;  // whole-layer points that ran
  // Decode attention over the same shape, contiguous and paged: median times,
  // keyed by model, dtype, cache mode and shape; paged points by page size.
  std::map<std::string, double> contiguous_time;
  std::map<std::string, std::map<std::uint64_t, double>> paged_time;
  // One entry per point: with --benchmark_repetitions every repetition (and the
  // median aggregate) carries the point's structured fields, all from the same
  // samples; the last one seen stands for the point.
  const auto benchmarks = results.value("benchmarks", nlohmann::json::array());
  std::map<std::string, const nlohmann::json*> points;
  std::vector<std::string> order;
  for (const auto& b : benchmarks) {
    if (!b.contains("phasebench")) continue;
    const std::string run = b.value("run_name", b.value("name", ""));
    if (!points.count(run)) order.push_back(run);
    points[run] = &b;
  }
  for (const auto& run : order) {
    const auto& b = *points.at(run);
    const auto& p = b.at("phasebench");
    auto& g = groups[{p.value("phase", ""), p.value("op", "")}];
    const auto status = p.value("status", "");
    if (status == "skipped") ++g.skipped;
    if (status == "error") ++g.errors;
    if (status == "ok" && p.contains("layer")) {
      auto l = p.at("layer");
      l["name"] = b.value("name", "");
      layers.push_back(std::move(l));
    }
    if (status != "ok" || !p.contains("roofline")) continue;
    const auto& r = p.at("roofline");
    if (r.at("fraction_of_roofline").is_number()) g.fractions.push_back(r.at("fraction_of_roofline").get<double>());
    if (p.contains("paired_read") && p.at("paired_read").value("fraction_median", nlohmann::json()).is_number())
      g.paired.push_back(p.at("paired_read").at("fraction_median").get<double>());
    ceiling_source = r.value("bandwidth_ceiling_source", "");
    if (p.value("phase", "") == "decode" && (p.value("op", "") == "attention" || p.value("op", "") == "attention_paged") &&
        p.contains("shape") && p.contains("time")) {
      const auto& sh = p.at("shape");
      const std::string key = fmt::format("{} {} {} B{} Hq{} Hkv{} L{} D{}", p.value("model", ""), p.value("dtype", ""),
                                          p.value("cache", ""), sh.value("B", 0), sh.value("Hq", 0), sh.value("Hkv", 0),
                                          sh.value("L", 0), sh.value("D", 0));
      const double t = p.at("time").at("median_s").get<double>();
      if (p.value("op", "") == "attention")
        contiguous_time[key] = t;
      else
        paged_time[key][p.value("args", nlohmann::json::object()).value("page_size", std::uint64_t{0})] = t;
    }
    if (p.value("op", "") == "gemv") {
      const auto& sh = p.at("shape");
      const double t = p.at("time").at("median_s").get<double>();
      const double P = r.at("peak_flops_per_s").get<double>(), W = r.at("bandwidth_bytes_per_s").get<double>();
      GemvPoint gp{sh.at("M").get<std::uint64_t>(), sh.at("N").get<std::uint64_t>(), sh.at("K").get<std::uint64_t>(),
                   element_bytes(parse_dtype(p.value("dtype", "fp32"))), t, p.at("flops").get<double>() / t,
                   p.at("bytes").at("total").get<double>() / t, P / W};
      const std::string key = p.value("model", "") + "." + p.value("target", "") + " " + p.value("dtype", "");
      auto& slot = gemv[key];
      auto it = slot.find(gp.batch);
      if (it == slot.end() || gp.time < it->second.time) slot[gp.batch] = gp;
    }
  }
  std::string out = fmt::format("\nphasebench summary: fraction of roofline ({} ceilings)\n", ceiling_source.empty() ? "no" : ceiling_source);
  // The read bandwidth measured again after the sweep (commands.cpp): say when
  // it moved enough to matter for the fractions above.
  const auto pb = results.value("context", nlohmann::json::object()).value("phasebench", nlohmann::json::object());
  if (pb.contains("bandwidth_check") && pb.at("bandwidth_check").is_object()) {
    const auto& c = pb.at("bandwidth_check");
    const double a = c.value("start_bytes_per_s", 0.0), b = c.value("end_bytes_per_s", 0.0);
    if (a > 0 && b > 0 && std::abs(b / a - 1.0) > 0.10)
      out += fmt::format(
          "  note: the measured read bandwidth was {:.1f} GB/s before the sweep and {:.1f} GB/s after it ({:+.0f}%):\n"
          "  the machine's bandwidth moved while it ran, and memory-bound fractions are uncertain by about that much.\n",
          a / 1e9, b / 1e9, 100 * (b / a - 1.0));
  }
  const bool any_paired = std::any_of(groups.begin(), groups.end(), [](const auto& kv) { return !kv.second.paired.empty(); });
  auto paired_cell = [&](const Group& g) {
    if (!any_paired) return std::string();
    if (g.paired.empty()) return fmt::format(" {:>8}", "-");
    return fmt::format(" {:>7.1f}% ({})", 100 * median_of(g.paired), g.paired.size());
  };
  out += fmt::format("  {:<8} {:<18} {:>6} {:>8} {:>8} {:>8} {:>7}{}\n", "phase", "op", "points", "best", "median", "skipped",
                     "errors", any_paired ? fmt::format(" {:>8}", "paired") : "");
  for (const auto& [k, g] : groups) {
    if (g.fractions.empty()) {
      out += fmt::format("  {:<8} {:<18} {:>6} {:>8} {:>8} {:>8} {:>7}{}\n", k.first, k.second, 0, "-", "-", g.skipped,
                         g.errors, paired_cell(g));
      continue;
    }
    out += fmt::format("  {:<8} {:<18} {:>6} {:>7.1f}% {:>7.1f}% {:>8} {:>7}{}\n", k.first, k.second, g.fractions.size(),
                       100 * *std::max_element(g.fractions.begin(), g.fractions.end()), 100 * median_of(g.fractions),
                       g.skipped, g.errors, paired_cell(g));
  }
  if (any_paired)
    out += "  paired: median over the memory-bound points of >= 4x LLC (their number in brackets) of each point's\n"
           "  median fraction of the streaming read timed right before each of its samples\n";
  // Paging's cost: the paged cache's time over the contiguous one's on the same
  // shapes (1.00: paging is free; 1.10: paged takes 10% longer).
  std::map<std::uint64_t, std::vector<double>> paged_cost;
  for (const auto& [key, by_page] : paged_time)
    if (auto c = contiguous_time.find(key); c != contiguous_time.end())
      for (const auto& [page, t] : by_page) paged_cost[page].push_back(t / c->second);
  if (!paged_cost.empty()) {
    out += "\ndecode attention, paged vs contiguous: paged time / contiguous time on the same shapes\n";
    out += fmt::format("  {:<10} {:>6} {:>8} {:>8} {:>8}\n", "page", "points", "median", "best", "worst");
    for (const auto& [page, v] : paged_cost)
      out += fmt::format("  {:<10} {:>6} {:>8.2f} {:>8.2f} {:>8.2f}\n", page, v.size(), median_of(v),
                         *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  }
  if (!gemv.empty()) {
    out += "\ndecode linear layers: batch where the layer crosses from memory-bound to compute-bound\n";
    out += "  measured: where the intensity reaches P_eff/W_eff, the best FLOP/s and the best GB/s the layer\n"
           "  achieved in this sweep (\"> B\" while the largest batch still moves 70% of W_eff);\n"
           "  predicted: where the intensity reaches the ridge P/W of the ceilings.\n";
    out += fmt::format("  {:<36} {:>16} {:>10}\n", "layer", "measured", "predicted");
    for (const auto& [key, pts] : gemv) {
      double p_eff = 0, w_eff = 0;
      for (const auto& [batch, gp] : pts) {
        p_eff = std::max(p_eff, gp.flops_per_s);
        w_eff = std::max(w_eff, gp.bytes_per_s);
      }
      const auto& last = pts.rbegin()->second;
      const auto& any = pts.begin()->second;
      std::string measured;
      if (pts.size() < 2) {
        measured = "one batch only";
      } else if (last.bytes_per_s >= 0.7 * w_eff) {
        measured = fmt::format("> {}", last.batch);
      } else {
        const auto m = predicted_crossing(any.N, any.K, any.e, p_eff / w_eff);
        measured = m ? std::to_string(m) : std::string("never");
      }
      const auto pred = predicted_crossing(any.N, any.K, any.e, any.ridge);
      out += fmt::format("  {:<36} {:>16} {:>10}\n", key, measured, pred ? std::to_string(pred) : std::string("never"));
    }
  }
  if (!layers.empty()) {
    out += "\nwhole layer: measured vs predicted (step = layer x layers + lm_head; prefill step = TTFT,\n"
           "  decode step = per-token latency; predicted from the datasheet roofline of the matched GPU)\n";
    out += fmt::format("  {:<58} {:>12} {:>12} {:>12} {:>7}\n", "point", "layer", "step", "predicted", "ratio");
    auto ms = [](const nlohmann::json& v) { return v.is_number() ? fmt::format("{:.3f} ms", v.get<double>() * 1e3) : std::string("-"); };
    for (const auto& l : layers) {
      const auto& ratio = l.at("ratio");
      out += fmt::format("  {:<58} {:>12} {:>12} {:>12} {:>7}\n", l.value("name", ""), ms(l.at("measured_layer_s")),
                         ms(l.at("measured_step_s")), ms(l.at("predicted_step_s")),
                         ratio.is_number() ? fmt::format("{:.2f}", ratio.get<double>()) : std::string("-"));
    }
  }
  return out;
}

}  // namespace phasebench
