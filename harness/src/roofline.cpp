// Roofline placement (roofline.hpp): attainable rate, ridge, bound, fraction of
// roofline, and the ceilings' choice by source.
#include "phasebench/roofline.hpp"

#include <algorithm>
#include <string>

#include "phasebench/error.hpp"

namespace phasebench {

std::string_view to_string(CeilingSource s) {
  switch (s) {
    case CeilingSource::datasheet: return "datasheet";
    case CeilingSource::theoretical: return "theoretical";
    case CeilingSource::measured: return "measured";
  }
  return "?";
}

CeilingSource parse_ceiling_source(std::string_view s) {
  if (s == "datasheet") return CeilingSource::datasheet;
  if (s == "theoretical") return CeilingSource::theoretical;
  if (s == "measured") return CeilingSource::measured;
  throw InputError("unknown ceiling source '" + std::string(s) + "'; use measured, datasheet or theoretical");
}

std::string_view to_string(Bound b) {
  switch (b) {
    case Bound::memory: return "memory";
    case Bound::compute: return "compute";
    case Bound::link: return "link";
  }
  return "?";
}

double attainable(double intensity, double peak_flops, double bandwidth) {
  return std::min(peak_flops, intensity * bandwidth);
}

Bound classify(double intensity, double ridge) { return intensity < ridge ? Bound::memory : Bound::compute; }

RooflinePlace place(double flops, double bytes, double seconds, double peak_flops, double bandwidth) {
  RooflinePlace r;
  r.peak_flops = peak_flops;
  r.bandwidth = bandwidth;
  r.ridge = bandwidth > 0 ? peak_flops / bandwidth : 0;
  const double intensity = bytes > 0 ? flops / bytes : 0;
  r.attainable_flops = attainable(intensity, peak_flops, bandwidth);
  r.bound = flops > 0 ? classify(intensity, r.ridge) : Bound::memory;
  if (seconds > 0) {
    if (flops > 0 && r.attainable_flops > 0)
      r.fraction = (flops / seconds) / r.attainable_flops;
    else if (bandwidth > 0)
      r.fraction = (bytes / seconds) / bandwidth;
  }
  return r;
}

double roofline_time(double flops, double bytes, double peak_flops, double bandwidth) {
  const double tc = peak_flops > 0 ? flops / peak_flops : 0;
  const double tm = bandwidth > 0 ? bytes / bandwidth : 0;
  return std::max(tc, tm);
}

void Ceilings::add_compute(DType t, Ceiling c) { compute_[t].push_back(std::move(c)); }
void Ceilings::add_bandwidth(Ceiling c) { bandwidth_.push_back(std::move(c)); }

namespace {
std::optional<Ceiling> pick(const std::vector<Ceiling>& v, CeilingSource preferred) {
  for (auto src : {preferred, CeilingSource::measured, CeilingSource::datasheet, CeilingSource::theoretical})
    for (const auto& c : v)
      if (c.source == src && c.value > 0) return c;
  return std::nullopt;
}
}  // namespace

std::optional<Ceiling> Ceilings::compute_for(DType t, CeilingSource preferred) const {
  auto it = compute_.find(t);
  if (it == compute_.end()) return std::nullopt;
  return pick(it->second, preferred);
}

std::optional<Ceiling> Ceilings::bandwidth_for(CeilingSource preferred) const { return pick(bandwidth_, preferred); }

bool beyond_caches(std::uint64_t bytes, std::uint64_t cache_bytes) {
  return cache_bytes > 0 && bytes / kBeyondCachesFactor >= cache_bytes;
}

}  // namespace phasebench
