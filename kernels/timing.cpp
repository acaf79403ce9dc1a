// The timer's decisions that need no device (timing.hpp): the rotating copies
// of cold short points and the throttle verdict of a group of samples.
#include "timing.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace phasebench {

std::string_view to_string(ColdTiming t) { return t == ColdTiming::rotate ? "rotate" : "single"; }

std::optional<ColdTiming> parse_cold_timing(std::string_view s) {
  if (s == "rotate") return ColdTiming::rotate;
  if (s == "single") return ColdTiming::single;
  return std::nullopt;
}

RotationPlan plan_cold_rotation(std::uint64_t footprint_bytes, std::uint64_t l2_bytes, std::uint64_t free_bytes) {
  RotationPlan p;
  if (footprint_bytes == 0 || l2_bytes == 0) {
    p.why = "the op's footprint or the L2 size is unknown";
    return p;
  }
  // Copies whose data together cover twice the L2: the flush before the sample
  // leaves none of them cached, and each copy's outputs are written back while
  // later copies stream in, inside the window.
  const std::uint64_t cover = 2 * l2_bytes;
  std::uint64_t k = (cover + footprint_bytes - 1) / footprint_bytes;
  if (k < 2) {
    p.why = "the op moves more than twice the L2: one launch already streams from memory";
    return p;
  }
  k = std::min(k, kMaxRotatingCopies);
  const std::uint64_t room = free_bytes / 4 / footprint_bytes;  // copies that fit in a quarter of free memory
  if (room < k) k = room;
  if (k < 2) {
    p.why = "no room in device memory for a second copy of the op's data";
    return p;
  }
  p.copies = k;
  p.bytes = k * footprint_bytes;
  return p;
}

void ThrottleWindow::merge(const ThrottleWindow& o) {
  window_s += o.window_s;
  for (const auto& [k, v] : o.held_s) held_s[k] += v;
  counters = counters || o.counters;
  hard_reasons = hard_reasons || o.hard_reasons;
  if (o.sm_mhz_min) sm_mhz_min = sm_mhz_min ? std::min(*sm_mhz_min, *o.sm_mhz_min) : *o.sm_mhz_min;
  if (o.sm_mhz_max) sm_mhz_max = sm_mhz_max ? std::max(*sm_mhz_max, *o.sm_mhz_max) : *o.sm_mhz_max;
  if (clock_source.empty()) clock_source = o.clock_source;
  else if (!o.clock_source.empty() && o.clock_source != clock_source) clock_source = "mixed";
}

namespace {

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * x);
  return buf;
}

std::string mhz(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f MHz", x);
  return buf;
}

bool is_hard_limiter(const std::string& name) { return name == "thermal" || name == "board_limit" || name == "reliability"; }

}  // namespace

ThrottleVerdict judge_throttle(const ThrottleWindow& w, double reference_mhz, double drop_ratio, double min_share) {
  ThrottleVerdict v;
  // The highest clock seen, in the run so far or in this window (the first point
  // of a run has no earlier reading to be judged against).
  const double reference = std::max(reference_mhz, w.sm_mhz_max.value_or(0.0));
  v.reference_mhz = reference;
  // Which limiters held the clocks for a material share of the window.
  bool any = false, hard = false;
  std::string list;
  if (w.counters && w.window_s > 0) {
    for (const auto& [name, s] : w.held_s) {
      if (name == "sync_boost") continue;  // matching other GPUs' clocks, not a limit of this one
      const double share = s / w.window_s;  // above 100% when NVML's counter moved in coarse steps
      if (share < min_share) continue;
      any = true;
      hard = hard || is_hard_limiter(name);
      list += (list.empty() ? "" : ", ") + name + " " + percent(share) + " of the window";
    }
  }
  // NVML reports no thermal violation time on most GPUs, and no hardware slowdown
  // or power brake at all: the reason bits read after samples count as well.
  if (w.hard_reasons) {
    any = hard = true;
    list += std::string(list.empty() ? "" : ", ") + "a hardware or thermal slowdown reason after a sample";
  }
  const std::string coarse =
      w.window_s > 0 && w.window_s < kThrottleShortWindow
          ? "; a window of " + std::to_string(static_cast<int>(w.window_s * 1e3 + 0.5)) +
                " ms, shorter than NVML's update period (10-100 ms): its counters and clocks are coarse"
          : "";
  if (!any) {
    v.why = (w.counters ? "no limiter held the clocks for " + percent(min_share) + " of the window"
                        : "no violation counters and no hardware or thermal slowdown reason") +
            coarse;
    return v;
  }
  if (w.sm_mhz_min && reference > 0) {
    const double ratio = *w.sm_mhz_min / reference;
    const double bar = hard ? drop_ratio : kThrottlePowerDropRatio;
    v.flagged = ratio < bar;
    v.why = "held by " + list + "; lowest SM clock " + mhz(*w.sm_mhz_min) + " = " + percent(ratio) +
            " of the highest seen (" + mhz(reference) + ")" +
            (v.flagged ? ": the clocks dropped"
                       : ", above " + percent(bar) + (hard ? "" : ", the bar for the power limit alone") +
                             ": not flagged") +
            coarse;
    return v;
  }
  v.flagged = hard;
  v.why = "held by " + list + "; no SM clock to judge the drop by" +
          (hard ? ": a thermal, board or reliability limit flags the point" : ": power alone is not flagged") + coarse;
  return v;
}

nlohmann::json throttle_json(const ThrottleWindow& w, const ThrottleVerdict& v) {
  nlohmann::json held = nlohmann::json::object();
  for (const auto& [k, s] : w.held_s) held[k] = s;
  nlohmann::json j = {{"flagged", v.flagged},
                      {"why", v.why},
                      {"window_s", w.window_s},
                      {"violation_counters", w.counters},
                      {"held_s", held},
                      {"clock_source", w.clock_source.empty() ? nlohmann::json(nullptr) : nlohmann::json(w.clock_source)},
                      {"sm_mhz_min", w.sm_mhz_min ? nlohmann::json(*w.sm_mhz_min) : nlohmann::json(nullptr)},
                      {"sm_mhz_max", w.sm_mhz_max ? nlohmann::json(*w.sm_mhz_max) : nlohmann::json(nullptr)},
                      {"reference_sm_mhz", v.reference_mhz > 0 ? nlohmann::json(v.reference_mhz) : nlohmann::json(nullptr)}};
  return j;
}

}  // namespace phasebench
