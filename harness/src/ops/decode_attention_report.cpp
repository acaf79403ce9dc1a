// What decode attention reports in the summary (phasebench/report.hpp): paging's
// cost against the contiguous cache, what an fp8 cache buys over the run's dtype,
// and multi-token and ragged steps against one token over fixed contexts, each
// from the points of the same shape.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "phasebench/op.hpp"
#include "phasebench/ops/decode_attention.hpp"
#include "phasebench/report.hpp"

namespace phasebench {

namespace {

// Decode attention points that ran and were placed on a roofline: median times
// keyed by model, dtype, cache mode and shape.
struct AttentionTimes {
  std::map<std::string, double> contiguous;                         // one token, fixed contexts, the run's dtype
  std::map<std::string, std::map<std::uint64_t, double>> paged;      // by page size
  // The same shapes over a cache in the run's dtype and in fp8 (kv_bits:8), by
  // shape key and page size (0: contiguous).
  std::map<std::pair<std::string, std::uint64_t>, double> wide, fp8;
  // Multi-token and ragged steps (decode_attention_multi): by shape key (model,
  // dtype, layout, batch, context), the points of each (new tokens, context distribution).
  struct Step {
    double time = 0, gbps = 0, fraction = 0;
  };
  std::map<std::string, std::map<std::pair<std::uint64_t, std::string>, Step>> steps;
};

AttentionTimes collect(const Standing& standing) {
  AttentionTimes c;
  for (const auto* b : standing) {
    const auto& p = b->at("phasebench");
    const auto op = p.value("op", "");
    if (p.value("status", "") != "ok" || !p.contains("roofline")) continue;
    if (p.value("phase", "") != "decode" || (op != kDecodeAttention && op != kDecodeAttentionPaged)) continue;
    if (!p.contains("shape") || !p.contains("time")) continue;
    const auto& sh = p.at("shape");
    const auto args = p.value("args", nlohmann::json::object());
    const std::string key = fmt::format("{} {} {} B{} Hq{} Hkv{} L{} D{}", p.value("model", ""), p.value("dtype", ""),
                                        p.value("cache", ""), sh.value("B", 0), sh.value("Hq", 0), sh.value("Hkv", 0),
                                        sh.value("L", 0), sh.value("D", 0));
    const double t = p.at("time").at("median_s").get<double>();
    const std::uint64_t page = op == kDecodeAttention ? 0 : args.value("page_size", std::uint64_t{0});
    if (args.contains("new_tokens")) {  // a multi-token or ragged step: its own section
      const auto step_key = fmt::format("{} {} {} B{} L{}", p.value("model", ""), p.value("dtype", ""),
                                        page ? fmt::format("page {}", page) : std::string("contiguous"),
                                        sh.value("B", 0), sh.value("L", 0));
      c.steps[step_key][{args.at("new_tokens").get<std::uint64_t>(), args.value("context_dist", std::string("fixed"))}] =
          {t, p.value("gbps", 0.0), p.value("fraction_of_roofline", 0.0)};
      continue;
    }
    if (args.value("kv_bits", std::uint64_t{0}) == 8) {
      c.fp8[{key, page}] = t;
      continue;
    }
    c.wide[{key, page}] = t;
    if (op == kDecodeAttention)
      c.contiguous[key] = t;
    else
      c.paged[key][page] = t;
  }
  return c;
}

// Paging's cost: the paged cache's time over the contiguous one's on the same
// shapes (1.00: paging is free; 1.10: paged takes 10% longer).
std::string paged_section(const AttentionTimes& c) {
  std::map<std::uint64_t, std::vector<double>> cost;
  for (const auto& [key, by_page] : c.paged)
    if (auto ct = c.contiguous.find(key); ct != c.contiguous.end())
      for (const auto& [page, t] : by_page) cost[page].push_back(t / ct->second);
  if (cost.empty()) return "";
  std::string out = "\ndecode attention, paged vs contiguous: paged time / contiguous time on the same shapes\n";
  out += fmt::format("  {:<10} {:>6} {:>8} {:>8} {:>8}\n", "page", "points", "median", "best", "worst");
  for (const auto& [page, v] : cost)
    out += fmt::format("  {:<10} {:>6} {:>8.2f} {:>8.2f} {:>8.2f}\n", page, v.size(), median_of(v),
                       *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  return out;
}

// What an fp8 cache buys: decode attention time over the 16-bit (or fp32) cache
// / time over the fp8 one, on the same shapes; the bytes are about half.
std::string fp8_cache_section(const AttentionTimes& c) {
  std::map<std::uint64_t, std::vector<double>> speedup;
  for (const auto& [key, t8] : c.fp8)
    if (auto w = c.wide.find(key); w != c.wide.end() && t8 > 0) speedup[key.second].push_back(w->second / t8);
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
std::string steps_section(const AttentionTimes& c) {
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

// The three, from one pass over the standing entries.
std::string attention_sections(const SummaryInput& in) {
  const auto c = collect(in.standing);
  return paged_section(c) + fp8_cache_section(c) + steps_section(c);
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(decode_attention_report) {
  using namespace phasebench;
  registry.section(SummarySection{"decode attention", 10, attention_sections});
}
