#pragma once
// What a backend's timer decides without touching a device, so that it can be
// tested on any machine: how a cold-cache sample of a short launch is timed
// (rotating copies of the inputs), and whether a group of samples ran throttled.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace phasebench {

// Cold-cache timing on a GPU. single: flush the L2, time one launch (the
// launch gap, the ramp and a second dependent launch are in every sample).
// rotate: flush the L2, time one CUDA graph that runs each of k prepared copies
// of the op once (together at least 2x the L2, so no copy finds its data, nor
// another copy's output, in the L2), and divide by k.
enum class ColdTiming { rotate, single };
std::string_view to_string(ColdTiming t);
// "rotate" or "single"; nothing for anything else.
std::optional<ColdTiming> parse_cold_timing(std::string_view s);

// The rotating copies for an op of `footprint` bytes: enough that together they
// cover twice the L2 (at least 2, at most kMaxRotatingCopies), and no more than
// a quarter of the device's free memory. copies < 2: time single launches, `why`
// says why.
inline constexpr std::uint64_t kMaxRotatingCopies = 128;
struct RotationPlan {
  std::uint64_t copies = 1;
  std::uint64_t bytes = 0;  // copies x footprint
  std::string why;          // when copies < 2
};
RotationPlan plan_cold_rotation(std::uint64_t footprint_bytes, std::uint64_t l2_bytes, std::uint64_t free_bytes);

// What the device said about one group of samples (one sampling call of a
// point): how long each limiter held the clocks below what was asked
// (NVML's violation counters, read before and after), and the SM clocks seen
// during the group (NVML's own clock samples, else the readings after samples).
struct ThrottleWindow {
  double window_s = 0;
  std::map<std::string, double> held_s;  // by limiter: power, thermal, board_limit, reliability, sync_boost, ...
  bool counters = false;                 // the violation counters could be read
  std::optional<double> sm_mhz_min, sm_mhz_max;
  std::string clock_source;  // "nvml_samples" or "after_samples"
  // The clock-event reason bits seen after samples that mean a hardware or
  // thermal slowdown (the fallback when there are no violation counters).
  bool hard_reasons = false;
  // Two groups of the same point (Google Benchmark comes back to a point): times add, clocks widen.
  void merge(const ThrottleWindow& o);
};

// The verdict: a point is throttled only when its clocks really dropped: a
// limiter held them for at least `min_share` of the window (or, without
// counters, a hardware/thermal reason was set) AND the lowest SM clock seen is
// below `drop_ratio` x `reference_mhz` (the run's highest clock). The power
// limiter alone, with clocks that stayed up, is routine under heavy GEMMs and
// is reported, not flagged. Without any clock reading, a thermal, board or
// reliability limiter flags the point on its own.
inline constexpr double kThrottleDropRatio = 0.9;
inline constexpr double kThrottleMinShare = 0.01;
struct ThrottleVerdict {
  bool flagged = false;
  std::string why;  // what held the clocks and how far they fell, or why not flagged
};
ThrottleVerdict judge_throttle(const ThrottleWindow& w, double reference_mhz, double drop_ratio = kThrottleDropRatio,
                               double min_share = kThrottleMinShare);
nlohmann::json throttle_json(const ThrottleWindow& w, const ThrottleVerdict& v, double reference_mhz);

}  // namespace phasebench
