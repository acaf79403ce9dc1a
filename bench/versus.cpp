// The summary's "ours vs the libraries" (versus.hpp): our point and each library's of
// the same key (phase, op, model, target, dtype, args) side by side, per operation,
// shape class and library. Names no operation: the pairing is on the keys alone.
#include "versus.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

namespace phasebench {

namespace {

std::string text_field(const nlohmann::json& p, const char* key) {
  return p.contains(key) && p.at(key).is_string() ? p.at(key).get<std::string>() : std::string();
}

// The args as results.py's Key freezes them: 8.0 and 8 are one value.
nlohmann::json frozen_args(const nlohmann::json& p) {
  nlohmann::json a = p.contains("args") && p.at("args").is_object() ? p.at("args") : nlohmann::json::object();
  for (auto& [k, v] : a.items())
    if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()))
      v = static_cast<std::int64_t>(v.get<double>());
  return a;
}

// A point's key without its implementation: where our point and a library's meet.
std::string key_less_impl(const nlohmann::json& p) {
  return nlohmann::json::array({text_field(p, "phase"), text_field(p, "op"), text_field(p, "model"),
                                text_field(p, "target"), text_field(p, "dtype"), frozen_args(p)})
      .dump();
}

// "model.target dtype batch:8 context:4096": which shape, for the refused points' list.
std::string shape_label(const nlohmann::json& p) {
  const auto target = text_field(p, "target");
  std::string out = text_field(p, "model") + (target.empty() ? "" : "." + target) + " " + text_field(p, "dtype");
  const auto args = frozen_args(p);  // named: items() of a temporary would outlive it
  for (const auto& [k, v] : args.items()) out += " " + k + ":" + (v.is_string() ? v.get<std::string>() : v.dump());
  return out;
}

double median_time(const nlohmann::json& p) {
  return p.contains("time") ? number_or_nan(p.at("time"), "median_s") : NAN;
}

bool measured(const nlohmann::json& p) {
  const double t = median_time(p);
  return text_field(p, "status") == "ok" && std::isfinite(t) && t > 0;
}

double fraction(const nlohmann::json& p) {
  return p.contains("roofline") ? number_or_nan(p.at("roofline"), "fraction_of_roofline") : NAN;
}

std::string pct(const std::vector<double>& v) {
  return v.empty() ? std::string("-") : fmt::format("{:.1f}%", 100 * median_of(v));
}

struct Pairs {
  std::vector<double> ratios;                  // library time / our time, per pair
  std::vector<double> ours, theirs;            // fractions of roofline, where the pair has them
  std::size_t ours_faster = 0, theirs_faster = 0;
};

}  // namespace

std::optional<std::string> shape_class(const nlohmann::json& pb) {
  if (!pb.contains("roofline") || !pb.at("roofline").is_object()) return std::nullopt;
  const auto& r = pb.at("roofline");
  auto bound = text_field(r, "bound");
  if (bound.empty()) bound = text_field(pb, "bound");
  const double P = number_or_nan(r, "peak_flops_per_s"), W = number_or_nan(r, "bandwidth_bytes_per_s");
  const double flops = number_or_nan(pb, "flops");
  const double bytes = pb.contains("bytes") && pb.at("bytes").is_object() ? number_or_nan(pb.at("bytes"), "total")
                                                                           : number_or_nan(pb, "bytes");
  // A side with no work needs no ceiling (KV append has no FLOPs); one with work does.
  const double tf = flops > 0 ? flops / P : 0, tb = bytes > 0 ? bytes / W : 0;
  const double t = std::max(tf, tb);
  if (bound.empty() || !(std::isfinite(tf) && std::isfinite(tb) && t > 0)) return std::nullopt;
  const char* size = t < kShapeSmallBelowS ? "small" : t < kShapeLargeFromS ? "medium" : "large";
  return bound + " " + size;
}

std::string versus_libraries(const Standing& standing) {
  std::map<std::string, const nlohmann::json*> ours;  // key less impl -> our point
  bool libraries = false;
  for (const auto* e : standing) {
    const auto& p = e->at("phasebench");
    const auto impl = text_field(p, "impl");
    if (impl == "own")
      ours[key_less_impl(p)] = &p;
    else if (!impl.empty())
      libraries = true;  // a file without impl fields (before schema 2's rows) has no sides to pair
  }
  if (ours.empty() || !libraries) return "";

  using Row = std::tuple<std::string, std::string, std::string, std::string>;  // phase, op, class, library
  std::map<Row, Pairs> rows;
  // Library points that did not run: (phase, op, library, status, message) -> their shapes.
  std::map<std::tuple<std::string, std::string, std::string, std::string, std::string>, std::vector<std::string>> refused;
  std::map<std::string, std::size_t> unpaired;  // library -> its measured points without a measured one of ours
  for (const auto* e : standing) {
    const auto& q = e->at("phasebench");
    const auto lib = text_field(q, "impl");
    if (lib.empty() || lib == "own") continue;
    if (!measured(q)) {
      refused[{text_field(q, "phase"), text_field(q, "op"), lib, text_field(q, "status"), text_field(q, "message")}]
          .push_back(shape_label(q));
      continue;
    }
    const auto it = ours.find(key_less_impl(q));
    if (it == ours.end() || !measured(*it->second)) {  // never paired with a point of ours that did not run
      ++unpaired[lib];
      continue;
    }
    const auto& o = *it->second;
    // The same key is the same shape, so one class; ours is placed, else the library's.
    const auto cls = shape_class(o).value_or(shape_class(q).value_or("unplaced"));
    auto& r = rows[{text_field(o, "phase"), text_field(o, "op"), cls, lib}];
    const double ratio = median_time(q) / median_time(o);
    r.ratios.push_back(ratio);
    r.ours_faster += ratio > 1;
    r.theirs_faster += ratio < 1;
    if (std::isfinite(fraction(o)) && std::isfinite(fraction(q))) {
      r.ours.push_back(fraction(o));
      r.theirs.push_back(fraction(q));
    }
  }
  if (rows.empty() && refused.empty()) return "";

  std::string out = fmt::format(
      "\nours vs the libraries (each point of ours against the same point of each library; ratio = the library's "
      "median time / ours,\n  above 1: ours is faster; class: the point's bound and the time its roofline allows, "
      "small < {:g} us <= medium < {:g} us <= large)\n",
      kShapeSmallBelowS * 1e6, kShapeLargeFromS * 1e6);
  if (!rows.empty()) {
    std::size_t wo = 18, wl = 7;
    for (const auto& [k, r] : rows) {
      wo = std::max(wo, std::get<1>(k).size());
      wl = std::max(wl, std::get<3>(k).size());
    }
    out += fmt::format("  {:<8} {:<{}} {:<14} {:<{}} {:>5} {:>7} {:>15} {:>8} {:>8}  {}\n", "phase", "op", wo, "class",
                       "library", wl, "pairs", "ratio", "(range)", "% ours", "% lib", "faster");
    for (const auto& [k, r] : rows) {
      const auto [lo, hi] = std::minmax_element(r.ratios.begin(), r.ratios.end());
      const double m = median_of(r.ratios);
      const auto& lib = std::get<3>(k);
      // The median pair decides; the counts say how consistently.
      const std::string faster =
          m > 1 ? fmt::format("ours ({} of {})", r.ours_faster, r.ratios.size())
          : m < 1 ? fmt::format("{} ({} of {})", lib, r.theirs_faster, r.ratios.size())
                  : std::string("neither (median 1.00)");
      out += fmt::format("  {:<8} {:<{}} {:<14} {:<{}} {:>5} {:>6.2f}x {:>15} {:>8} {:>8}  {}\n", std::get<0>(k),
                         std::get<1>(k), wo, std::get<2>(k), lib, wl, r.ratios.size(), m,
                         fmt::format("({:.2f}-{:.2f})", *lo, *hi), pct(r.ours), pct(r.theirs), faster);
    }
    out += "  % ours, % lib: median fraction of roofline over the pairs\n";
  }
  for (const auto& [lib, n] : unpaired)
    out += fmt::format("  note: {} measured {} point(s) have no measured point of ours on the same key (not paired)\n",
                       n, lib);
  if (!refused.empty()) {
    out += "  library points that did not run, by reason:\n";
    constexpr std::size_t kShown = 6;  // the rest counted: the reason is what matters
    for (const auto& [k, shapes] : refused) {
      const auto& [phase, op, lib, status, message] = k;
      out += fmt::format("    {} {} {}: {} {} point(s): {}\n", phase, op, lib, shapes.size(), status,
                         message.empty() ? "(no reason recorded)" : message);
      std::string list;
      for (std::size_t i = 0; i < std::min(shapes.size(), kShown); ++i) list += (i ? ", " : "") + shapes[i];
      if (shapes.size() > kShown) list += fmt::format(", and {} more", shapes.size() - kShown);
      out += "      " + list + "\n";
    }
  }
  return out;
}

}  // namespace phasebench
