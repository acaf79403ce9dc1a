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
  // Median times of our own bf16 decode GEMVs, keyed by "model.target" and batch.
  std::map<std::pair<std::string, std::uint64_t>, double> bf16, int4;
  for (const auto* b : in.standing) {
    const auto& p = b->at("phasebench");
    const auto op = p.value("op", "");
    if (p.value("status", "") != "ok" || p.value("phase", "") != "decode" || p.value("impl", "") != "own" ||
        p.value("dtype", "") != "bf16")
      continue;
    if ((op != kLinear && op != kLinearInt4) || !p.contains("time")) continue;
    const std::pair<std::string, std::uint64_t> key{
        p.value("model", "") + "." + p.value("target", ""),
        p.value("args", nlohmann::json::object()).value("batch", std::uint64_t{0})};
    (op == kLinear ? bf16 : int4)[key] = p.at("time").at("median_s").get<double>();
  }
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
