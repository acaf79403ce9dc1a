// Decode linear crossings and the standing entry of each point (crossings.hpp).
#include "crossings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <tuple>

#include "phasebench/dtype.hpp"
#include "phasebench/ops/moe.hpp"
#include "phasebench/workload.hpp"

namespace phasebench {

namespace {

// A point's identity: its run_name, else its name (non-empty strings), else the
// entry alone ("#" and its index, after a NUL no name holds).
std::string point_id(const nlohmann::json& b, std::size_t index) {
  for (const char* k : {"run_name", "name"})
    if (const auto it = b.find(k); it != b.end() && it->is_string() && !it->get_ref<const std::string&>().empty())
      return it->get<std::string>();
  return std::string(1, '\0') + "#" + std::to_string(index);
}

}  // namespace

std::vector<const nlohmann::json*> standing_points(const nlohmann::json& results) {
  struct Standing {
    const nlohmann::json* iteration = nullptr;
    const nlohmann::json* median = nullptr;
  };
  std::map<std::string, Standing> by_run;
  std::vector<std::string> order;
  // Pointers into `results` itself (value() would copy).
  static const nlohmann::json none = nlohmann::json::array();
  const auto& benchmarks = results.is_object() && results.contains("benchmarks") ? results.at("benchmarks") : none;
  for (std::size_t i = 0; i < benchmarks.size(); ++i) {
    const auto& b = benchmarks[i];
    if (!b.is_object()) continue;
    const std::string run = point_id(b, i);
    if (!by_run.count(run)) order.push_back(run);  // points in the order first seen
    auto& s = by_run[run];
    // An entry without a phasebench object is none of ours: it neither stands nor hides another.
    if (!b.contains("phasebench") || !b.at("phasebench").is_object()) continue;
    if (b.value("run_type", nlohmann::json()) != "aggregate")
      s.iteration = &b;
    else if (b.value("aggregate_name", nlohmann::json()) == "median")
      s.median = &b;
  }
  std::vector<const nlohmann::json*> out;
  for (const auto& run : order) {
    const auto& s = by_run.at(run);
    if (const auto* b = s.iteration ? s.iteration : s.median) out.push_back(b);
  }
  return out;
}

namespace {

nlohmann::json batch_or_null(const std::optional<std::uint64_t>& b) { return b ? nlohmann::json(*b) : nlohmann::json(); }

using BestRates = std::map<std::uint64_t, std::pair<double, double>>;  // batch -> (FLOP/s, bytes/s) of its fastest point

// The batches of a layer, and its measured crossing: where its intensity
// reaches P_eff/W_eff, the best FLOP/s and the best bytes/s it achieved
// (`batch_at` turns a ridge into a batch); "> B" while its largest batch B still
// streams at 70% of W_eff, "one batch only" with a single batch.
std::pair<nlohmann::json, nlohmann::json> measured_crossing(const BestRates& best,
                                                            const std::function<std::optional<std::uint64_t>(double)>& batch_at) {
  nlohmann::json batches = nlohmann::json::array();
  double p_eff = 0, w_eff = 0;
  for (const auto& [B, rates] : best) {
    batches.push_back(B);
    p_eff = std::max(p_eff, rates.first);
    w_eff = std::max(w_eff, rates.second);
  }
  nlohmann::json measured = {{"peak_flops_per_s", p_eff}, {"bandwidth_bytes_per_s", w_eff}, {"batch", nullptr}};
  const auto& [last_batch, last_rates] = *best.rbegin();
  if (best.size() < 2) {
    measured["text"] = "one batch only";
  } else if (last_rates.second >= 0.7 * w_eff) {
    measured["text"] = fmt::format("> {}", last_batch);  // still streaming at the largest batch measured
  } else {
    const auto m = batch_at(p_eff / w_eff);
    measured["batch"] = batch_or_null(m);
    measured["text"] = m ? std::to_string(*m) : std::string("never");
  }
  return {batches, measured};
}

// The predicted crossing per ceiling source, `predict(roof)` for each source's
// roofline, and for the ceilings in use, which may mix sources (e.g. a measured
// bandwidth with a theoretical peak where no GEMM of the dtype was measured).
nlohmann::json predicted_crossings(const nlohmann::json& by_source, const nlohmann::json& in_use,
                                   const std::string& ceiling_used,
                                   const std::function<nlohmann::json(const nlohmann::json&)>& predict) {
  nlohmann::json predicted = nlohmann::json::object();
  for (const auto& [source, roof] : by_source.items()) predicted[source] = predict(roof);
  if (!predicted.contains(ceiling_used) && in_use.is_object()) predicted[ceiling_used] = predict(in_use);
  return predicted;
}

struct LayerPoints {
  std::uint64_t N = 0, K = 0;
  DType dtype = DType::bf16;
  BestRates best;
  std::map<std::uint64_t, double> fastest;                  // batch -> its median time
  nlohmann::json by_source = nlohmann::json::object();      // roofline_by_source of a point (ceilings are per run)
  nlohmann::json in_use;                                     // its "roofline" (the ceilings in use)
};

}  // namespace

nlohmann::json decode_linear_crossings(const nlohmann::json& results) {
  const auto pb = results.value("context", nlohmann::json::object()).value("phasebench", nlohmann::json::object());
  const std::string ceiling_used = pb.value("ceiling_used", "measured");
  std::map<std::tuple<std::string, std::string, std::string>, LayerPoints> layers;
  for (const auto* b : standing_points(results)) {
    const auto& p = b->at("phasebench");
    if (p.value("phase", "") != "decode" || p.value("op_kind", "") != "linear" || p.value("status", "") != "ok") continue;
    if (!p.contains("time") || !p.contains("shape") || !p.contains("bytes")) continue;
    auto& l = layers[{p.value("model", ""), p.value("target", ""), p.value("dtype", "")}];
    const auto& sh = p.at("shape");
    l.N = sh.value("N", std::uint64_t{0});
    l.K = sh.value("K", std::uint64_t{0});
    l.dtype = parse_dtype(p.value("dtype", "bf16"));
    const auto M = sh.value("M", std::uint64_t{0});
    const double t = p.at("time").value("median_s", 0.0);
    if (t <= 0) continue;
    if (!l.fastest.count(M) || t < l.fastest[M]) {
      l.fastest[M] = t;
      l.best[M] = {p.value("flops", 0.0) / t, p.at("bytes").value("total", 0.0) / t};
    }
    l.by_source = p.value("roofline_by_source", nlohmann::json::object());
    if (p.contains("roofline")) l.in_use = p.at("roofline");  // none without ceilings
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, l] : layers) {
    const auto& [model, target, dtype] = key;
    const auto [batches, measured] =
        measured_crossing(l.best, [&](double ridge) { return linear_batch_at_intensity(l.N, l.K, l.dtype, ridge); });
    const auto predicted = predicted_crossings(l.by_source, l.in_use, ceiling_used, [&](const nlohmann::json& roof) {
      const double ridge = roof.value("ridge_flop_per_byte", 0.0);
      return nlohmann::json{{"batch", batch_or_null(linear_batch_at_intensity(l.N, l.K, l.dtype, ridge))},
                            {"ridge_flop_per_byte", ridge},
                            {"compute_ceiling_source", roof.value("compute_ceiling_source", "")},
                            {"bandwidth_ceiling_source", roof.value("bandwidth_ceiling_source", "")}};
    });
    out.push_back({{"layer", model + "." + target},
                   {"model", model},
                   {"target", target},
                   {"dtype", dtype},
                   {"N", l.N},
                   {"K", l.K},
                   {"batches", batches},
                   {"measured", measured},
                   {"predicted", predicted},
                   {"ceiling_used", ceiling_used}});
  }
  return out;
}

nlohmann::json decode_moe_crossings(const nlohmann::json& results) {
  const auto pb = results.value("context", nlohmann::json::object()).value("phasebench", nlohmann::json::object());
  const std::string ceiling_used = pb.value("ceiling_used", "measured");
  struct MoePoints {
    MoeShape s;
    Routing routing;
    DType dtype = DType::bf16;
    BestRates best;
    std::map<std::uint64_t, double> fastest;
    nlohmann::json by_source = nlohmann::json::object(), in_use;
  };
  std::map<std::tuple<std::string, std::string, std::string>, MoePoints> layers;
  for (const auto* b : standing_points(results)) {
    const auto& p = b->at("phasebench");
    if (p.value("phase", "") != "decode" || p.value("op_kind", "") != kMoe || p.value("status", "") != "ok") continue;
    if (!p.contains("time") || !p.contains("shape") || !p.contains("bytes")) continue;
    const auto& sh = p.at("shape");
    const std::string routing = sh.value("routing", "uniform");
    auto& l = layers[{p.value("model", ""), routing, p.value("dtype", "")}];
    l.s = {0, sh.value("k", std::uint64_t{0}), sh.value("E", std::uint64_t{0}), sh.value("h", std::uint64_t{0}),
           sh.value("I", std::uint64_t{0})};
    l.routing = parse_routing(routing);
    l.dtype = parse_dtype(p.value("dtype", "bf16"));
    const auto B = sh.value("T", std::uint64_t{0});
    const double t = p.at("time").value("median_s", 0.0);
    if (t <= 0) continue;
    if (!l.fastest.count(B) || t < l.fastest[B]) {
      l.fastest[B] = t;
      l.best[B] = {p.value("flops", 0.0) / t, p.at("bytes").value("total", 0.0) / t};
    }
    l.by_source = p.value("roofline_by_source", nlohmann::json::object());
    if (p.contains("roofline")) l.in_use = p.at("roofline");
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, l] : layers) {
    if (l.best.empty()) continue;
    const auto& [model, routing, dtype] = key;
    const auto [batches, measured] =
        measured_crossing(l.best, [&](double ridge) { return moe_batch_at_intensity(l.s, l.routing, l.dtype, ridge); });
    const auto predicted = predicted_crossings(l.by_source, l.in_use, ceiling_used, [&](const nlohmann::json& roof) {
      const double ridge = roof.value("ridge_flop_per_byte", 0.0);
      return nlohmann::json{{"batch", batch_or_null(moe_batch_at_intensity(l.s, l.routing, l.dtype, ridge))},
                            {"dense_batch", batch_or_null(linear_batch_at_intensity(2 * l.s.I, l.s.h, l.dtype, ridge))},
                            {"ridge_flop_per_byte", ridge},
                            {"compute_ceiling_source", roof.value("compute_ceiling_source", "")},
                            {"bandwidth_ceiling_source", roof.value("bandwidth_ceiling_source", "")}};
    });
    out.push_back({{"layer", model + ".experts"},
                   {"model", model},
                   {"routing", routing},
                   {"dtype", dtype},
                   {"k", l.s.k},
                   {"E", l.s.E},
                   {"h", l.s.h},
                   {"I", l.s.I},
                   {"batches", batches},
                   {"measured", measured},
                   {"predicted", predicted},
                   {"ceiling_used", ceiling_used}});
  }
  return out;
}

}  // namespace phasebench
