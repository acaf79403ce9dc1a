// What a collective's point reports (phasebench/report.hpp): its "collective" block,
// nccl-tests' algorithm and bus bandwidth (busbw = algbw x bus factor), the bus
// bandwidth against one direction of the matched GPU's link, and the analytical
// model's time for it (link latency + bytes over the link: analytical.hpp's
// LinkModel); and the summary section that lists them. An HBM roofline fraction
// says little of a collective: the link is its limit.
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "phasebench/analytical.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/json_fields.hpp"
#include "phasebench/model.hpp"
#include "phasebench/ops/collectives.hpp"
#include "phasebench/report.hpp"

namespace phasebench {

namespace {

nlohmann::json collective_json(const Point& p, double median_s, const RunView& run) {
  const auto& r = p.request;
  const auto n = r.shape["gpus"];
  const double bytes = static_cast<double>(r.shape["count"]) * static_cast<double>(element_bytes(r.dtype));
  const double algbw = median_s > 0 ? bytes / median_s / 1e9 : NAN, factor = bus_factor(r.kind, n);
  nlohmann::json j;
  j["gpus"] = n;
  j["bytes"] = bytes;
  j["algbw_gbs"] = finite_or_null(algbw);
  j["bus_factor"] = factor;
  j["busbw_gbs"] = finite_or_null(algbw * factor);
  j["link_gbs_one_direction"] = nullptr;
  j["busbw_of_link"] = nullptr;
  j["predicted_s"] = nullptr;
  if (run.spec && run.spec->interconnect_gbps > 0 && n > 1) {
    const auto link = LinkModel::of(*run.spec);
    const double one_way = link.gbps / 2;
    j["link_gbs_one_direction"] = one_way;
    j["busbw_of_link"] = finite_or_null(algbw * factor / one_way);
    // The model's op of the same collective: its link bytes (bus bytes: size x factor) and its latency.
    LayerOp op{"", r.kind, Shape{{"bytes", static_cast<std::uint64_t>(bytes)}, {"gpus", n}}, {}};
    j["predicted_s"] = link.latency_s(op) + bytes * factor / (one_way * 1e9);
    j["latency_source"] = link.latency_source;
  }
  return j;
}

std::string collectives_section(const SummaryInput& in) {
  std::string rows;
  for (const auto* b : in.standing) {
    const auto& p = b->at("phasebench");
    if (p.value("status", "") != "ok" || !p.contains("collective")) continue;
    const auto& c = p.at("collective");
    const auto median = p.contains("time") ? p.at("time").value("median_s", nlohmann::json()) : nlohmann::json();
    rows += fmt::format("  {:<64} {:>10} {:>9} {:>9} {:>7} {:>10}\n", b->value("name", ""),
                        number_or_dash(median, "{:.1f} us", 1e6), number_or_dash(c.at("algbw_gbs"), "{:.1f}"),
                        number_or_dash(c.at("busbw_gbs"), "{:.1f}"), number_or_dash(c.at("busbw_of_link"), "{:.0f}%", 100),
                        number_or_dash(c.at("predicted_s"), "{:.1f} us", 1e6));
  }
  if (rows.empty()) return "";
  std::string out =
      "\ncollectives (NCCL): time, algorithm and bus bandwidth in GB/s as nccl-tests reports them (busbw = algbw x\n"
      "  2(n-1)/n for all_reduce, (n-1)/n otherwise), busbw against one direction of the GPU's link, and the model's\n"
      "  time (link latency + bus bytes over the link); their HBM roofline fraction is not their limit\n";
  out += fmt::format("  {:<64} {:>10} {:>9} {:>9} {:>7} {:>10}\n", "point", "time", "algbw", "busbw", "of link",
                     "predicted");
  return out + rows;
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(collectives_report) {
  using namespace phasebench;
  for (const char* k : {kAllReduce, kAllGather, kReduceScatter, kAllToAll})
    // The link bounds them: the summary's fraction table gives them no fraction of the roofline.
    registry.point_report(PointReport{.kind = k, .json = collective_json, .roofline_bound = false});
  registry.section(SummarySection{"collectives", 85, collectives_section});
}
