// What the int4 GEMV reports in the summary (phasebench/report.hpp): what int4
// weights buy, our int4 GEMV against our bf16 GEMV on the same projection and batch.
#include <fmt/format.h>

#include <map>
#include <string>
#include <utility>

#include "phasebench/op.hpp"
#include "phasebench/ops/linear.hpp"
#include "phasebench/ops/linear_int4.hpp"
#include "phasebench/report.hpp"

namespace phasebench {

namespace {

std::string int4_section(const SummaryInput& in) {
  // Median times of our own decode GEMVs (bf16 and int4 weights), keyed by "model.target" and batch.
  std::map<std::pair<std::string, std::uint64_t>, double> bf16, int4;
  for_each_own_decode_gemv(in.standing, kLinear, [&](const nlohmann::json&, const std::string& layer,
                                                      std::uint64_t batch, double t) { bf16[{layer, batch}] = t; });
  for_each_own_decode_gemv(in.standing, kLinearInt4, [&](const nlohmann::json&, const std::string& layer,
                                                          std::uint64_t batch, double t) { int4[{layer, batch}] = t; });
  std::string rows;
  for (const auto& [key, t4] : int4) {
    const auto b = bf16.find(key);
    if (b == bf16.end()) continue;
    rows += fmt::format("  {:<36} {:>6} {:>12} {:>12} {:>8.2f}x\n", key.first, key.second,
                        fmt::format("{:.1f} us", b->second * 1e6), fmt::format("{:.1f} us", t4 * 1e6), b->second / t4);
  }
  if (rows.empty()) return "";
  return "\ndecode GEMV, int4 weights vs bf16 (our kernels, the same projection and batch; speedup = bf16 time / "
         "int4 time)\n" +
         fmt::format("  {:<36} {:>6} {:>12} {:>12} {:>9}\n", "layer", "batch", "bf16", "int4", "speedup") + rows;
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(linear_int4_report) {
  using namespace phasebench;
  registry.section(SummarySection{"decode GEMV, int4 vs bf16", 70, int4_section});
}
