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
// of the op once, and divide by k. The flush leaves every copy cold; copies whose
// allocations cover 2x the L2 also push each other's outputs out to memory inside
// the window (for footprints under L2/64 the 128 copies cover less).
enum class ColdTiming { rotate, single };
std::string_view to_string(ColdTiming t);
// "rotate" or "single"; nothing for anything else.
std::optional<ColdTiming> parse_cold_timing(std::string_view s);

// The rotating copies for an op of `footprint` bytes (what it allocates, which
// for a KV append or a ragged batch is more than it touches): enough that
// together they cover twice the L2 (at least 2, at most kMaxRotatingCopies), and no more than
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

// The verdict: a point is throttled only when its clocks really dropped. A
// thermal, board or reliability limiter held them for at least `min_share` of
// the window (or a hardware/thermal slowdown reason was set after a sample, as
// NVML reports no violation time for those on most GPUs) AND the lowest SM
// clock is below `drop_ratio` x the highest seen (the run's so far,
// `reference_mhz`, or the window's own); or the power limiter alone held them
// and the clock fell below kThrottlePowerDropRatio of it: heavy GEMMs run
// power-capped at 85-90% of boost routinely, which is reported, not flagged.
// Without any clock reading, only a thermal, board or reliability limiter flags.
// Windows under kThrottleShortWindow say that NVML's readings are coarse.
inline constexpr double kThrottleDropRatio = 0.9;
inline constexpr double kThrottlePowerDropRatio = 0.75;
inline constexpr double kThrottleMinShare = 0.01;
inline constexpr double kThrottleShortWindow = 0.1;  // seconds
struct ThrottleVerdict {
  bool flagged = false;
  std::string why;           // what held the clocks and how far they fell, or why not flagged
  double reference_mhz = 0;  // the highest clock it judged against (0: none)
};
ThrottleVerdict judge_throttle(const ThrottleWindow& w, double reference_mhz, double drop_ratio = kThrottleDropRatio,
                               double min_share = kThrottleMinShare);
nlohmann::json throttle_json(const ThrottleWindow& w, const ThrottleVerdict& v);

}  // namespace phasebench
