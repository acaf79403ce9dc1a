// What MLA decode attention reports in the summary (phasebench/report.hpp): each
// point's intensity against the ridge of the ceilings it was placed on. Its
// intensity is about 2*H*(2R+P) / (c*(R+P)) FLOP/byte whatever the batch and
// context: DeepSeek-V2-Lite's 16 heads sit below an H200's bf16 ridge, V3's 128 near it.
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "phasebench/op.hpp"
#include "phasebench/report.hpp"

namespace phasebench {

namespace {

std::string row(const nlohmann::json& p) {
  const auto op = p.value("op", "");
  const auto sh = p.value("shape", nlohmann::json::object());
  const auto r = p.value("roofline", nlohmann::json::object());
  const auto args = p.value("args", nlohmann::json::object());
  auto fixed = [](double v, int digits) { return std::isfinite(v) ? fmt::format("{:.{}f}", v, digits) : std::string("-"); };
  // Without ceilings (--no-calibrate on a CPU) there is no ridge: the intensity alone.
  const double intensity = number_or_nan(p, "intensity"), ridge = number_or_nan(r, "ridge_flop_per_byte");
  const double fraction = number_or_nan(r, "fraction_of_roofline");
  const std::string bound = std::isfinite(ridge) ? p.value("bound", "") : "-";
  return fmt::format("  {:<18} {:<5} {:>5} {:>4} {:>7} {:>5} {:>8} {:>7} {:>6}  {:<7} {:>9} {:>8} {:>7}\n",
                     p.value("model", ""), p.value("dtype", ""), sh.value("B", 0), sh.value("H", 0), sh.value("L", 0),
                     op == "latent_attention" ? std::string("-") : std::to_string(args.value("page_size", std::uint64_t{0})),
                     fixed(intensity, 1), fixed(ridge, 1), fixed(intensity / ridge, 2), bound,
                     fixed(number_or_nan(p, "tflops"), 3), fixed(number_or_nan(p, "gbps"), 1),
                     std::isfinite(fraction) ? fixed(100.0 * fraction, 1) + "%" : "-");
}

std::string mla_section(const SummaryInput& in) {
  std::string rows;
  for (const auto* b : in.standing) {
    const auto& p = b->at("phasebench");
    const auto op = p.value("op", "");
    if (p.value("status", "") == "ok" && (op == "latent_attention" || op == "latent_attention_paged")) rows += row(p);
  }
  if (rows.empty()) return "";
  std::string out =
      "\nMLA decode attention (absorbed): intensity against the ridge (I/ridge < 1: memory-bound; about "
      "2*H*(2R+P)/(c*(R+P)) FLOP/B at any batch and context)\n";
  out += fmt::format("  {:<18} {:<5} {:>5} {:>4} {:>7} {:>5} {:>8} {:>7} {:>6}  {:<7} {:>9} {:>8} {:>7}\n", "model", "dtype",
                     "batch", "H", "context", "page", "FLOP/B", "ridge", "I/rdg", "bound", "TFLOP/s", "GB/s", "roof");
  return out + rows;
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(latent_attention_report) {
  using namespace phasebench;
  registry.section(SummarySection{"MLA decode attention", 40, mla_section});
}
