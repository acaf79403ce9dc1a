// The summary a run ends with (and `phasebench summary FILE` prints): fraction
// of roofline per phase and op, paging's cost, what an fp8 KV cache buys,
// multi-token and ragged decode steps, where MLA decode attention sits against
// the ridge, the decode linear and MoE crossings, what int4 weights buy over
// bf16, whole layers measured against the analytical model, how the points
// stopped sampling, and energy.
#include "summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "crossings.hpp"
#include "fixture.hpp"
#include "phasebench/roofline.hpp"

namespace phasebench {

namespace {

double median_of(const std::vector<double>& v) { return stats_of(v).median; }

// What the summary reads off the standing entry of each point.
struct Group {
  std::vector<double> fractions;
  std::vector<double> paired;  // points' median fraction of the paired reads' bandwidth (suspect ones left out)
  std::size_t suspect = 0;     // points whose paired fraction is above kPairedSuspectAbove
  std::size_t skipped = 0, errors = 0;
};
struct Collected {
  std::map<std::pair<std::string, std::string>, Group> groups;  // (phase, op) -> its points
  std::string ceiling_source;
  std::vector<nlohmann::json> layers;  // whole-layer points that ran
  // Decode attention over the same shape, contiguous and paged: median times,
  // keyed by model, dtype, cache mode and shape; paged points by page size.
  std::map<std::string, double> contiguous_time;
  std::map<std::string, std::map<std::uint64_t, double>> paged_time;
  // The same shapes over a cache in the run's dtype and in fp8 (kv_bits:8), by
  // shape key and page size (0: contiguous).
  std::map<std::pair<std::string, std::uint64_t>, double> wide_cache_time, fp8_cache_time;
  // Our decode GEMVs on the same projection and batch: bf16 and int4 weights,
  // median times keyed by "model.target" and batch.
  std::map<std::pair<std::string, std::uint64_t>, double> gemv_bf16_time, gemv_int4_time;
  // Multi-token and ragged decode steps (the decode_attention_multi group): by
  // shape key (model, dtype, layout, batch, context), the points of each (new
  // tokens, context distribution).
  struct StepPoint {
    double time = 0, gbps = 0, fraction = 0;
  };
  std::map<std::string, std::map<std::pair<std::uint64_t, std::string>, StepPoint>> steps;
  // MLA decode attention points (latent_attention, latent_attention_paged): one
  // row each, with their intensity against the ridge of the ceilings used.
  std::vector<std::string> mla_rows;
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
  // Energy per (phase, op): watts, J per token (layer points: times the model's
  // layers), and J per byte of memory-bound decode points.
  struct EnergyGroup {
    std::vector<double> watts, joules_per_token, joules_per_byte;
  };
  std::map<std::pair<std::string, std::string>, EnergyGroup> energy;
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
  auto& g = c.energy[{p.value("phase", ""), p.value("op", "")}];
  g.watts.push_back(e.value("watts", 0.0));
  if (e.value("joules_per_token", nlohmann::json()).is_number()) {
    const double layers = p.contains("layer") ? p.at("layer").value("layers", 1.0) : 1.0;
    g.joules_per_token.push_back(e.at("joules_per_token").get<double>() * std::max(1.0, layers));
  }
  if (p.value("phase", "") == "decode" && p.value("bound", "") == "memory" && e.value("joules_per_byte", nlohmann::json()).is_number())
    g.joules_per_byte.push_back(e.at("joules_per_byte").get<double>());
}

void collect_attention_time(const nlohmann::json& p, Collected& c) {
  const auto op = p.value("op", "");
  if (p.value("phase", "") != "decode" || (op != "attention" && op != "attention_paged")) return;
  if (!p.contains("shape") || !p.contains("time")) return;
  const auto& sh = p.at("shape");
  const auto args = p.value("args", nlohmann::json::object());
  const std::string key = fmt::format("{} {} {} B{} Hq{} Hkv{} L{} D{}", p.value("model", ""), p.value("dtype", ""),
                                      p.value("cache", ""), sh.value("B", 0), sh.value("Hq", 0), sh.value("Hkv", 0),
                                      sh.value("L", 0), sh.value("D", 0));
  const double t = p.at("time").at("median_s").get<double>();
  const std::uint64_t page = op == "attention" ? 0 : args.value("page_size", std::uint64_t{0});
  if (args.contains("new_tokens")) {  // a multi-token or ragged step: its own section
    const auto step_key = fmt::format("{} {} {} B{} L{}", p.value("model", ""), p.value("dtype", ""),
                                      page ? fmt::format("page {}", page) : std::string("contiguous"),
                                      sh.value("B", 0), sh.value("L", 0));
    Collected::StepPoint sp{t, p.value("gbps", 0.0), p.value("fraction_of_roofline", 0.0)};
    c.steps[step_key][{args.at("new_tokens").get<std::uint64_t>(), args.value("context_dist", std::string("fixed"))}] = sp;
    return;
  }
  if (args.value("kv_bits", std::uint64_t{0}) == 8) {
    c.fp8_cache_time[{key, page}] = t;
    return;
  }
  c.wide_cache_time[{key, page}] = t;
  if (op == "attention")
    c.contiguous_time[key] = t;
  else
    c.paged_time[key][page] = t;
}

void collect_gemv_time(const nlohmann::json& p, Collected& c) {
  const auto op = p.value("op", "");
  if (p.value("phase", "") != "decode" || p.value("impl", "") != "own" || p.value("dtype", "") != "bf16") return;
  if ((op != "gemv" && op != "gemv_int4") || !p.contains("time")) return;
  const std::pair<std::string, std::uint64_t> key{p.value("model", "") + "." + p.value("target", ""),
                                                  p.value("args", nlohmann::json::object()).value("batch", std::uint64_t{0})};
  (op == "gemv" ? c.gemv_bf16_time : c.gemv_int4_time)[key] = p.at("time").at("median_s").get<double>();
}

// Its intensity is about 2*H*(2R+P) / (c*(R+P)) FLOP/byte whatever the batch and
// context: DeepSeek-V2-Lite's 16 heads sit below an H200's bf16 ridge, V3's 128 near it.
void collect_mla_row(const nlohmann::json& p, Collected& c) {
  const auto op = p.value("op", "");
  if (op != "latent_attention" && op != "latent_attention_paged") return;
  const auto sh = p.value("shape", nlohmann::json::object());
  const auto r = p.value("roofline", nlohmann::json::object());
  const auto args = p.value("args", nlohmann::json::object());
  auto num = [](const nlohmann::json& j, const char* k) {
    return j.value(k, nlohmann::json()).is_number() ? j.at(k).get<double>() : NAN;
  };
  auto fixed = [](double v, int digits) { return std::isfinite(v) ? fmt::format("{:.{}f}", v, digits) : std::string("-"); };
  // Without ceilings (--no-calibrate on a CPU) there is no ridge: the intensity alone.
  const double intensity = num(p, "intensity"), ridge = num(r, "ridge_flop_per_byte");
  const std::string bound = std::isfinite(ridge) ? p.value("bound", "") : "-";
  c.mla_rows.push_back(fmt::format(
      "  {:<18} {:<5} {:>5} {:>4} {:>7} {:>5} {:>8} {:>7} {:>6}  {:<7} {:>9} {:>8} {:>7}\n", p.value("model", ""),
      p.value("dtype", ""), sh.value("B", 0), sh.value("H", 0), sh.value("L", 0),
      op == "latent_attention" ? std::string("-") : std::to_string(args.value("page_size", std::uint64_t{0})),
      fixed(intensity, 1), fixed(ridge, 1), fixed(intensity / ridge, 2), bound, fixed(num(p, "tflops"), 3),
      fixed(num(p, "gbps"), 1), std::isfinite(num(r, "fraction_of_roofline")) ? fixed(100.0 * num(r, "fraction_of_roofline"), 1) + "%" : "-"));
}

std::string mla_section(const Collected& c) {
  if (c.mla_rows.empty()) return "";
  std::string out =
      "\nMLA decode attention (absorbed): intensity against the ridge (I/ridge < 1: memory-bound; about "
      "2*H*(2R+P)/(c*(R+P)) FLOP/B at any batch and context)\n";
  out += fmt::format("  {:<18} {:<5} {:>5} {:>4} {:>7} {:>5} {:>8} {:>7} {:>6}  {:<7} {:>9} {:>8} {:>7}\n", "model", "dtype",
                     "batch", "H", "context", "page", "FLOP/B", "ridge", "I/rdg", "bound", "TFLOP/s", "GB/s", "roof");
  for (const auto& row : c.mla_rows) out += row;
  return out;
}

Collected collect(const nlohmann::json& results) {
  Collected c;
  for (const auto* entry : standing_points(results)) {
    const auto& b = *entry;
    const auto& p = b.at("phasebench");
    auto& g = c.groups[{p.value("phase", ""), p.value("op", "")}];
    const auto status = p.value("status", "");
    if (status == "skipped") ++g.skipped;
    if (status == "error") ++g.errors;
    if (status == "ok" && p.contains("layer")) {
      auto l = p.at("layer");
      l["name"] = b.value("name", "");
      c.layers.push_back(std::move(l));
    }
    if (status == "ok") collect_gemv_time(p, c);
    if (status == "ok") collect_measurement(p, c);
    if (status == "ok") collect_mla_row(p, c);
    if (status != "ok" || !p.contains("roofline")) continue;
    const auto& r = p.at("roofline");
    if (r.at("fraction_of_roofline").is_number()) g.fractions.push_back(r.at("fraction_of_roofline").get<double>());
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
    collect_attention_time(p, c);
  }
  return c;
}

// What int4 weights buy: our int4 GEMV against our bf16 GEMV on the same shapes.
std::string int4_section(const Collected& c) {
  std::string rows;
  for (const auto& [key, t4] : c.gemv_int4_time) {
    const auto b = c.gemv_bf16_time.find(key);
    if (b == c.gemv_bf16_time.end()) continue;
    rows += fmt::format("  {:<36} {:>6} {:>12} {:>12} {:>8.2f}x\n", key.first, key.second,
                        fmt::format("{:.1f} us", b->second * 1e6), fmt::format("{:.1f} us", t4 * 1e6), b->second / t4);
  }
  if (rows.empty()) return "";
  return "\ndecode GEMV, int4 weights vs bf16 (our kernels, the same projection and batch; speedup = bf16 time / "
         "int4 time)\n" +
         fmt::format("  {:<36} {:>6} {:>12} {:>12} {:>9}\n", "layer", "batch", "bf16", "int4", "speedup") + rows;
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

// Per phase and op: points, best and median fraction of roofline, skipped,
// errors, and the paired reads' fraction where any point has one.
std::string fraction_table(const Collected& c) {
  const bool any_paired =
      std::any_of(c.groups.begin(), c.groups.end(), [](const auto& kv) { return !kv.second.paired.empty() || kv.second.suspect; });
  auto paired_cell = [&](const Group& g) {
    if (!any_paired) return std::string();
    if (g.paired.empty()) return fmt::format(" {:>8}", "-");
    return fmt::format(" {:>7.1f}% ({})", 100 * median_of(g.paired), g.paired.size());
  };
  std::size_t w = 18;  // the op column: as wide as the longest op (latent_attention_paged)
  for (const auto& kv : c.groups) w = std::max(w, kv.first.second.size());
  std::string out = fmt::format("  {:<8} {:<{}} {:>6} {:>8} {:>8} {:>8} {:>7}{}\n", "phase", "op", w, "points", "best",
                                "median", "skipped", "errors", any_paired ? fmt::format(" {:>8}", "paired") : "");
  for (const auto& [k, g] : c.groups) {
    if (g.fractions.empty()) {
      out += fmt::format("  {:<8} {:<{}} {:>6} {:>8} {:>8} {:>8} {:>7}{}\n", k.first, k.second, w, 0, "-", "-", g.skipped,
                         g.errors, paired_cell(g));
      continue;
    }
    out += fmt::format("  {:<8} {:<{}} {:>6} {:>7.1f}% {:>7.1f}% {:>8} {:>7}{}\n", k.first, k.second, w, g.fractions.size(),
                       100 * *std::max_element(g.fractions.begin(), g.fractions.end()), 100 * median_of(g.fractions),
                       g.skipped, g.errors, paired_cell(g));
  }
  if (any_paired)
    out += "  paired: median over the memory-bound points beyond the caches (their number in brackets) of each\n"
           "  point's median fraction of the streaming read timed right before each of its samples\n";
  for (const auto& [k, g] : c.groups)
    if (g.suspect)
      out += fmt::format("  note: {} {}: {} point(s) above {:.0f}% of their paired read, left out as suspect "
                         "(paired_read.why_suspect)\n",
                         k.first, k.second, g.suspect, 100 * kPairedSuspectAbove);
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

// Paging's cost: the paged cache's time over the contiguous one's on the same
// shapes (1.00: paging is free; 1.10: paged takes 10% longer).
// What an fp8 cache buys: decode attention time over the 16-bit (or fp32) cache
// / time over the fp8 one, on the same shapes; the bytes are about half.
std::string fp8_cache_section(const Collected& c) {
  std::map<std::uint64_t, std::vector<double>> speedup;
  for (const auto& [key, t8] : c.fp8_cache_time)
    if (auto w = c.wide_cache_time.find(key); w != c.wide_cache_time.end() && t8 > 0) speedup[key.second].push_back(w->second / t8);
  if (speedup.empty()) return "";
  std::string out =
      "\ndecode attention, fp8 cache vs the run's dtype: speedup = time over the wider cache / time over the fp8 "
      "one (its bytes are about half)\n";
  out += fmt::format("  {:<12} {:>6} {:>8} {:>8} {:>8}\n", "layout", "points", "median", "best", "worst");
  for (const auto& [page, v] : speedup)
    out += fmt::format("  {:<12} {:>6} {:>7.2f}x {:>7.2f}x {:>7.2f}x\n", page ? fmt::format("page {}", page) : "contiguous",
                       v.size(), median_of(v), *std::max_element(v.begin(), v.end()), *std::min_element(v.begin(), v.end()));
  return out;
}

// Multi-token steps and ragged batches against one token over fixed contexts on
// the same shape: a step of S tokens that takes little more than one yields
// nearly S times the tokens per second (what speculative verification buys);
// a ragged batch of the same mean context shows what the imbalance costs.
std::string steps_section(const Collected& c) {
  std::string out;
  for (const auto& [key, by_step] : c.steps) {
    const auto base = by_step.find({1, "fixed"});
    if (base == by_step.end() || base->second.time <= 0) continue;
    if (out.empty()) {
      out = "\ndecode attention, multi-token steps and ragged batches: against one new token over fixed contexts on "
            "the same shape\n";
      out += fmt::format("  {:<44} {:<20} {:>7} {:>9} {:>8} {:>8}\n", "shape", "step", "time", "tokens/s", "GB/s",
                         "roofline");
    }
    bool first = true;
    for (const auto& [step, sp] : by_step) {
      const double rel = sp.time / base->second.time;
      out += fmt::format("  {:<44} {:<20} {:>6.2f}x {:>8.2f}x {:>8.1f} {:>7.0f}%\n", first ? key : "",
                         fmt::format("S={} {}", step.first, step.second), rel,
                         static_cast<double>(step.first) / rel, sp.gbps, 100 * sp.fraction);
      first = false;
    }
  }
  return out;
}

std::string paged_section(const Collected& c) {
  std::map<std::uint64_t, std::vector<double>> paged_cost;
  for (const auto& [key, by_page] : c.paged_time)
    if (auto ct = c.contiguous_time.find(key); ct != c.contiguous_time.end())
      for (const auto& [page, t] : by_page) paged_cost[page].push_back(t / ct->second);
  if (paged_cost.empty()) return "";
  std::string out = "\ndecode attention, paged vs contiguous: paged time / contiguous time on the same shapes\n";
  out += fmt::format("  {:<10} {:>6} {:>8} {:>8} {:>8}\n", "page", "points", "median", "best", "worst");
  for (const auto& [page, v] : paged_cost)
    out += fmt::format("  {:<10} {:>6} {:>8.2f} {:>8.2f} {:>8.2f}\n", page, v.size(), median_of(v),
                       *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  return out;
}

// The decode linear crossings: recorded by the run (schema 2); computed here for
// files that predate them.
std::string crossings_section(const nlohmann::json& results, const nlohmann::json& pb) {
  const auto crossings = pb.contains("decode_linear_crossings") ? pb.at("decode_linear_crossings")
                                                                : decode_linear_crossings(results);
  if (crossings.empty()) return "";
  std::string out = "\ndecode linear layers: batch where the layer crosses from memory-bound to compute-bound\n";
  out += "  measured: where the intensity reaches P_eff/W_eff, the best FLOP/s and the best GB/s the layer\n"
         "  achieved in this sweep (\"> B\" while the largest batch still moves 70% of W_eff);\n"
         "  predicted: where the intensity reaches the ridge P/W of the ceilings in use.\n";
  out += fmt::format("  {:<36} {:>16} {:>10}\n", "layer", "measured", "predicted");
  for (const auto& x : crossings) {
    const auto used = x.at("predicted").value(x.value("ceiling_used", ""), nlohmann::json::object());
    std::string predicted = "-";  // no ceilings
    if (used.contains("batch"))
      predicted = used.at("batch").is_number() ? std::to_string(used.at("batch").get<std::uint64_t>()) : "never";
    out += fmt::format("  {:<36} {:>16} {:>10}\n", x.value("layer", "") + " " + x.value("dtype", ""),
                       x.at("measured").value("text", "-"), predicted);
  }
  return out;
}

// Decode MoE: the batch where the routed experts stop being memory-bound,
// measured and predicted, beside a dense layer of one expert's width.
std::string moe_crossings_section(const nlohmann::json& results, const nlohmann::json& pb) {
  const auto crossings = pb.contains("decode_moe_crossings") ? pb.at("decode_moe_crossings") : decode_moe_crossings(results);
  if (crossings.empty()) return "";
  std::string out = "\ndecode MoE experts: batch where the routed experts cross from memory-bound to compute-bound\n";
  out += "  measured: where the intensity (expected experts touched) reaches P_eff/W_eff of the layer's own points\n"
         "  (\"> B\" while the largest batch still moves 70% of W_eff); predicted: where it reaches the ridge P/W;\n"
         "  dense: where one expert's gate_up as a dense layer reaches the same ridge (every weight read at any batch).\n";
  out += fmt::format("  {:<36} {:<10} {:>12} {:>10} {:>8}\n", "layer", "routing", "measured", "predicted", "dense");
  auto text = [](const nlohmann::json& v) {
    return v.is_number() ? std::to_string(v.get<std::uint64_t>()) : std::string("never");
  };
  for (const auto& x : crossings) {
    const auto used = x.at("predicted").value(x.value("ceiling_used", ""), nlohmann::json::object());
    const std::string predicted = used.contains("batch") ? text(used.at("batch")) : "-";
    const std::string dense = used.contains("dense_batch") ? text(used.at("dense_batch")) : "-";
    out += fmt::format("  {:<36} {:<10} {:>12} {:>10} {:>8}\n", x.value("layer", "") + " " + x.value("dtype", ""),
                       x.value("routing", ""), x.at("measured").value("text", "-"), predicted, dense);
  }
  return out;
}

// Whole layers: the measured layer and step times against the analytical model's.
std::string layers_section(const std::vector<nlohmann::json>& layers) {
  if (layers.empty()) return "";
  std::string out =
      "\nwhole layer: measured vs predicted (step = layer x layers + lm_head; prefill step = TTFT,\n"
      "  decode step = per-token latency; predicted from the datasheet roofline of the matched GPU)\n";
  out += fmt::format("  {:<58} {:>12} {:>12} {:>12} {:>7}\n", "point", "layer", "step", "predicted", "ratio");
  auto ms = [](const nlohmann::json& v) {
    return v.is_number() ? fmt::format("{:.3f} ms", v.get<double>() * 1e3) : std::string("-");
  };
  for (const auto& l : layers) {
    const auto& ratio = l.at("ratio");
    out += fmt::format("  {:<58} {:>12} {:>12} {:>12} {:>7}\n", l.value("name", ""), ms(l.at("measured_layer_s")),
                       ms(l.at("measured_step_s")), ms(l.at("predicted_step_s")),
                       ratio.is_number() ? fmt::format("{:.2f}", ratio.get<double>()) : std::string("-"));
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
  out += fmt::format("  {:<8} {:<18} {:>7} {:>9} {:>12} {:>14}\n", "phase", "op", "points", "watts", "J/token", "pJ/B (memory)");
  auto med = [](const std::vector<double>& v, const char* f) { return v.empty() ? std::string("-") : fmt::format(fmt::runtime(f), median_of(v)); };
  for (const auto& [key, g] : c.energy)
    out += fmt::format("  {:<8} {:<18} {:>7} {:>9} {:>12} {:>14}\n", key.first, key.second, g.watts.size(), med(g.watts, "{:.0f}"),
                       med(g.joules_per_token, "{:.3g}"),
                       g.joules_per_byte.empty() ? std::string("-") : fmt::format("{:.1f}", median_of(g.joules_per_byte) * 1e12));
  return out;
}

std::string summarize(const nlohmann::json& results) {
  const Collected c = collect(results);
  const auto pb = results.value("context", nlohmann::json::object()).value("phasebench", nlohmann::json::object());
  std::string out = fmt::format("\nphasebench summary: fraction of roofline ({} ceilings)\n",
                                c.ceiling_source.empty() ? "no" : c.ceiling_source);
  out += bandwidth_note(pb);
  out += fraction_table(c);
  out += paged_section(c);
  out += fp8_cache_section(c);
  out += steps_section(c);
  out += mla_section(c);
  out += crossings_section(results, pb);
  out += moe_crossings_section(results, pb);
  out += int4_section(c);
  out += layers_section(c.layers);
  out += measurement_section(c, pb);
  out += energy_section(c, pb);
  return out;
}

}  // namespace phasebench
