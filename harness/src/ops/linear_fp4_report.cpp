// What the FP4 GEMV reports in the summary (phasebench/report.hpp): what FP4
// weights buy, our FP4 GEMV in each format against our bf16 GEMV on the same
// projection and batch.
#include <fmt/format.h>

#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "phasebench/op.hpp"
#include "phasebench/ops/linear.hpp"
#include "phasebench/ops/linear_fp4.hpp"
#include "phasebench/report.hpp"

namespace phasebench {

namespace {

std::string fp4_section(const SummaryInput& in) {
  // Median times of our own decode GEMVs: bf16 keyed by ("model.target", batch), FP4
  // by ("model.target", batch, format).
  std::map<std::pair<std::string, std::uint64_t>, double> bf16;
  std::map<std::tuple<std::string, std::uint64_t, std::string>, double> fp4;
  for_each_own_decode_gemv(in.standing, kLinear, [&](const nlohmann::json&, const std::string& layer,
                                                      std::uint64_t batch, double t) { bf16[{layer, batch}] = t; });
  for_each_own_decode_gemv(in.standing, kLinearFp4,
                           [&](const nlohmann::json& args, const std::string& layer, std::uint64_t batch, double t) {
                             fp4[{layer, batch, args.value("format", std::string())}] = t;
                           });
  std::string rows;
  for (const auto& [key, t4] : fp4) {
    const auto& [layer, batch, format] = key;
    const auto b = bf16.find({layer, batch});
    if (b == bf16.end()) continue;
    rows += fmt::format("  {:<36} {:>6} {:>7} {:>12} {:>12} {:>8.2f}x\n", layer, batch, format,
                        fmt::format("{:.1f} us", b->second * 1e6), fmt::format("{:.1f} us", t4 * 1e6), b->second / t4);
  }
  if (rows.empty()) return "";
  return "\ndecode GEMV, FP4 weights vs bf16 (our kernels, the same projection and batch; speedup = bf16 time / "
         "FP4 time)\n" +
         fmt::format("  {:<36} {:>6} {:>7} {:>12} {:>12} {:>9}\n", "layer", "batch", "format", "bf16", "fp4",
                     "speedup") +
         rows;
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(linear_fp4_report) {
  using namespace phasebench;
  registry.section(SummarySection{"decode GEMV, fp4 vs bf16", 71, fp4_section});
}
