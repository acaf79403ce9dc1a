// What the MoE experts report (phasebench/report.hpp): the decode MoE crossings,
// recorded in context.phasebench when a sweep ends, and their summary section
// beside a dense layer of one expert's width.
#include <fmt/format.h>

#include <map>
#include <string>
#include <tuple>

#include "phasebench/crossing.hpp"
#include "phasebench/dtype.hpp"
#include "phasebench/ops/moe.hpp"
#include "phasebench/workload.hpp"

namespace phasebench {

nlohmann::json decode_moe_crossings(const Standing& standing, const nlohmann::json& run) {
  const std::string ceiling_used = run.value("ceiling_used", "measured");
  struct Layer {
    MoeShape s;
    Routing routing;
    DType dtype = DType::bf16;
    CrossingPoints points;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Layer> layers;
  for (const auto* b : standing) {
    const auto* point = crossing_input(*b, kMoe);
    if (!point) continue;
    const auto& p = *point;
    const auto& sh = p.at("shape");
    const std::string routing = sh.value("routing", "uniform");
    auto& l = layers[{p.value("model", ""), routing, p.value("dtype", "")}];
    l.s = {0, sh.value("k", std::uint64_t{0}), sh.value("E", std::uint64_t{0}), sh.value("h", std::uint64_t{0}),
           sh.value("I", std::uint64_t{0})};
    l.routing = parse_routing(routing);
    l.dtype = parse_dtype(p.value("dtype", "bf16"));
    l.points.add(p, sh.value("T", std::uint64_t{0}));
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, l] : layers) {
    if (l.points.best.empty()) continue;
    const auto& [model, routing, dtype] = key;
    auto batch_at = [&](double ridge) { return moe_batch_at_intensity(l.s, l.routing, l.dtype, ridge); };
    const auto [batches, measured] = measured_crossing(l.points, batch_at);
    const auto predicted = predicted_crossings(l.points, ceiling_used, batch_at, [&](double ridge, nlohmann::json& j) {
      j["dense_batch"] = batch_or_null(linear_batch_at_intensity(2 * l.s.I, l.s.h, l.dtype, ridge));
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

namespace {

std::string crossings_section(const SummaryInput& in) {
  const auto crossings = in.record("decode_moe_crossings");
  if (crossings.empty()) return "";
  std::string out = "\ndecode MoE experts: batch where the routed experts cross from memory-bound to compute-bound\n";
  out += "  measured: where the intensity (expected experts touched) reaches P_eff/W_eff of the layer's own points\n"
         "  (\"> B\" while the largest batch still moves 70% of W_eff), kept within its points' bound labels;\n"
         "  predicted: where it reaches the ridge P/W;\n"
         "  dense: where one expert's gate_up as a dense layer reaches the same ridge (every weight read at any batch).\n";
  out += fmt::format("  {:<36} {:<10} {:>12} {:>10} {:>8}\n", "layer", "routing", "measured", "predicted", "dense");
  for (const auto& x : crossings) {
    const auto used = prediction_in_use(x);
    const std::string predicted = used.contains("batch") ? batch_text(used.at("batch")) : "-";
    const std::string dense = used.contains("dense_batch") ? batch_text(used.at("dense_batch")) : "-";
    out += fmt::format("  {:<36} {:<10} {:>12} {:>10} {:>8}\n", x.value("layer", "") + " " + x.value("dtype", ""),
                       x.value("routing", ""), x.at("measured").value("text", "-"), predicted, dense);
  }
  return out + own_ridge_notes(crossings);
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(moe_report) {
  using namespace phasebench;
  registry.record(RunRecord{"decode_moe_crossings", decode_moe_crossings});
  registry.section(SummarySection{"decode MoE crossings", 60, crossings_section});
}
