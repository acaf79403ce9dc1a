// What the linear layer reports (phasebench/report.hpp): the decode linear
// crossings, recorded in context.phasebench when a sweep ends (results schema 2),
// and their summary section; computed from the points for older files.
#include <fmt/format.h>

#include <map>
#include <string>
#include <tuple>

#include "phasebench/crossing.hpp"
#include "phasebench/dtype.hpp"
#include "phasebench/ops/linear.hpp"
#include "phasebench/workload.hpp"

namespace phasebench {

nlohmann::json decode_linear_crossings(const Standing& standing, const nlohmann::json& run) {
  const std::string ceiling_used = run.value("ceiling_used", "measured");
  struct Layer {
    std::uint64_t N = 0, K = 0;
    DType dtype = DType::bf16;
    CrossingPoints points;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Layer> layers;
  for (const auto* b : standing) {
    const auto* point = crossing_input(*b, kLinear);
    if (!point) continue;
    const auto& p = *point;
    auto& l = layers[{p.value("model", ""), p.value("target", ""), p.value("dtype", "")}];
    const auto& sh = p.at("shape");
    l.N = sh.value("N", std::uint64_t{0});
    l.K = sh.value("K", std::uint64_t{0});
    l.dtype = parse_dtype(p.value("dtype", "bf16"));
    l.points.add(p, sh.value("M", std::uint64_t{0}));
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, l] : layers) {
    if (l.points.best.empty()) continue;
    const auto& [model, target, dtype] = key;
    auto batch_at = [&](double ridge) { return linear_batch_at_intensity(l.N, l.K, l.dtype, ridge); };
    const auto [batches, measured] = measured_crossing(l.points, batch_at);
    out.push_back({{"layer", model + "." + target},
                   {"model", model},
                   {"target", target},
                   {"dtype", dtype},
                   {"N", l.N},
                   {"K", l.K},
                   {"batches", batches},
                   {"measured", measured},
                   {"predicted", predicted_crossings(l.points, ceiling_used, batch_at)},
                   {"ceiling_used", ceiling_used}});
  }
  return out;
}

void for_each_own_decode_gemv(const Standing& standing, std::string_view op,
                              const std::function<void(const nlohmann::json& args, const std::string& layer,
                                                       std::uint64_t batch, double median_s)>& f) {
  for (const auto* b : standing) {
    const auto& p = b->at("phasebench");
    if (p.value("status", "") != "ok" || p.value("phase", "") != "decode" || p.value("impl", "") != "own" ||
        p.value("dtype", "") != "bf16" || p.value("op", "") != op || !p.contains("time"))
      continue;
    const auto args = p.value("args", nlohmann::json::object());
    f(args, p.value("model", "") + "." + p.value("target", ""), args.value("batch", std::uint64_t{0}),
      p.at("time").at("median_s").get<double>());
  }
}

namespace {

std::string crossings_section(const SummaryInput& in) {
  const auto crossings = in.record("decode_linear_crossings");
  if (crossings.empty()) return "";
  std::string out = "\ndecode linear layers: batch where the layer crosses from memory-bound to compute-bound\n";
  out += "  measured: where the intensity reaches P_eff/W_eff, the best FLOP/s and the best GB/s the layer\n"
         "  achieved in this sweep (\"> B\" while the largest batch still moves 70% of W_eff), kept between the\n"
         "  last batch its points label memory-bound and the first they label compute-bound;\n"
         "  predicted: where the intensity reaches the ridge P/W of the ceilings in use.\n";
  out += fmt::format("  {:<36} {:>16} {:>10}\n", "layer", "measured", "predicted");
  for (const auto& x : crossings) {
    const auto used = prediction_in_use(x);
    const std::string predicted = used.contains("batch") ? batch_text(used.at("batch")) : "-";  // "-": no ceilings
    out += fmt::format("  {:<36} {:>16} {:>10}\n", x.value("layer", "") + " " + x.value("dtype", ""),
                       x.at("measured").value("text", "-"), predicted);
  }
  return out + own_ridge_notes(crossings);
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(linear_report) {
  using namespace phasebench;
  registry.record(RunRecord{"decode_linear_crossings", decode_linear_crossings});
  registry.section(SummarySection{"decode linear crossings", 50, crossings_section});
}
