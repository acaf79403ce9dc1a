// The timer's device-free decisions (kernels/timing.hpp): how many rotating
// copies a cold short point gets, and when a group of samples counts as throttled.
#include <gtest/gtest.h>

#include "timing.hpp"

using namespace phasebench;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t kL2 = 50 * MiB;
constexpr std::uint64_t kFree = 140000 * MiB;
}  // namespace

TEST(ColdRotation, CopiesCoverTwiceTheL2) {
  // 2 MiB of KV (B=1, L=512 class): 50 copies make 100 MiB = 2x L2.
  auto p = plan_cold_rotation(2 * MiB, kL2, kFree);
  EXPECT_EQ(p.copies, 50u);
  EXPECT_EQ(p.bytes, 100 * MiB);
  EXPECT_GE(p.bytes, 2 * kL2);
  // A footprint that does not divide: rounded up, still >= 2x L2.
  p = plan_cold_rotation(30 * MiB, kL2, kFree);
  EXPECT_EQ(p.copies, 4u);
  EXPECT_GE(p.bytes, 2 * kL2);
  // Just under 2x L2: two copies.
  p = plan_cold_rotation(99 * MiB, kL2, kFree);
  EXPECT_EQ(p.copies, 2u);
}

TEST(ColdRotation, BigOpsAndTinyMemoryTimeSingleLaunches) {
  auto p = plan_cold_rotation(100 * MiB, kL2, kFree);
  EXPECT_EQ(p.copies, 1u);
  EXPECT_NE(p.why.find("more than twice the L2"), std::string::npos) << p.why;
  // Tiny ops are capped (the flush before each sample still leaves each copy cold).
  p = plan_cold_rotation(4096, kL2, kFree);
  EXPECT_EQ(p.copies, kMaxRotatingCopies);
  // No more than a quarter of free memory.
  p = plan_cold_rotation(10 * MiB, kL2, 100 * MiB);
  EXPECT_EQ(p.copies, 2u);
  p = plan_cold_rotation(10 * MiB, kL2, 60 * MiB);
  EXPECT_EQ(p.copies, 1u);
  EXPECT_NE(p.why.find("no room"), std::string::npos) << p.why;
  EXPECT_EQ(plan_cold_rotation(0, kL2, kFree).copies, 1u);
}

TEST(ColdRotation, ParsesItsFlag) {
  EXPECT_EQ(parse_cold_timing("rotate"), ColdTiming::rotate);
  EXPECT_EQ(parse_cold_timing("single"), ColdTiming::single);
  EXPECT_FALSE(parse_cold_timing("Rotate").has_value());
  EXPECT_EQ(to_string(ColdTiming::single), "single");
}

namespace {
ThrottleWindow window(std::map<std::string, double> held, std::optional<double> min_mhz) {
  ThrottleWindow w;
  w.window_s = 1.0;
  w.counters = true;
  w.held_s = std::move(held);
  w.sm_mhz_min = min_mhz;
  w.sm_mhz_max = min_mhz;
  return w;
}
}  // namespace

TEST(Throttle, PowerCapWithClocksUpIsNotThrottling) {
  const auto v = judge_throttle(window({{"power", 0.8}}, 1950), 1980);
  EXPECT_FALSE(v.flagged) << v.why;
  EXPECT_NE(v.why.find("power 80.0%"), std::string::npos) << v.why;
}

TEST(Throttle, ALimiterAndADropAreThrottling) {
  // A thermal limit and clocks at 86% of the highest: throttled.
  auto v = judge_throttle(window({{"thermal", 0.02}}, 1700), 1980);
  EXPECT_TRUE(v.flagged) << v.why;
  EXPECT_NE(v.why.find("the clocks dropped"), std::string::npos) << v.why;
  // The power limit alone at 86% is a heavy GEMM's routine cap: not flagged...
  v = judge_throttle(window({{"power", 0.3}}, 1700), 1980);
  EXPECT_FALSE(v.flagged) << v.why;
  EXPECT_NE(v.why.find("the bar for the power limit alone"), std::string::npos) << v.why;
  // ...but at 71% the clocks really fell.
  v = judge_throttle(window({{"power", 0.3}}, 1400), 1980);
  EXPECT_TRUE(v.flagged) << v.why;
}

TEST(Throttle, SlowdownReasonsCountBesideTheCounters) {
  // NVML reports no thermal violation time on most GPUs: the reason bits read
  // after samples flag a drop even when only the power counter could be read.
  auto w = window({{"power", 0.0}}, 1500);
  w.hard_reasons = true;
  const auto v = judge_throttle(w, 1980);
  EXPECT_TRUE(v.flagged) << v.why;
  EXPECT_NE(v.why.find("slowdown reason"), std::string::npos) << v.why;
}

TEST(Throttle, TheFirstPointIsJudgedAgainstItsOwnHighestClock) {
  // No earlier reading in the run (reference 0): the window's own highest clock serves.
  auto w = window({{"thermal", 0.2}}, 1500);
  w.sm_mhz_max = 1980;
  EXPECT_TRUE(judge_throttle(w, 0).flagged);
}

TEST(Throttle, ShortWindowsSayTheirReadingsAreCoarse) {
  auto w = window({{"power", 0.012}}, 1980);
  w.window_s = 0.008;  // 150% of the window: NVML's counter moved in one coarse step
  const auto v = judge_throttle(w, 1980);
  EXPECT_FALSE(v.flagged) << v.why;
  EXPECT_NE(v.why.find("power 150.0% of the window"), std::string::npos) << v.why;
  EXPECT_NE(v.why.find("a window of 8 ms, shorter than NVML's update period"), std::string::npos) << v.why;
}

TEST(Throttle, ADropWithoutALimiterIsNotThrottling) {
  // Clocks low (an idle GPU ramping, a clock set by the admin) but no limiter held them.
  auto v = judge_throttle(window({{"power", 0.0}, {"thermal", 0.0}}, 1200), 1980);
  EXPECT_FALSE(v.flagged) << v.why;
  // Below the share that counts (1% of the window), and sync boost never counts.
  v = judge_throttle(window({{"power", 0.005}, {"sync_boost", 0.9}}, 1200), 1980);
  EXPECT_FALSE(v.flagged) << v.why;
}

TEST(Throttle, WithoutClocksOnlyHardLimitersFlag) {
  EXPECT_FALSE(judge_throttle(window({{"power", 0.5}}, std::nullopt), 0).flagged);
  EXPECT_TRUE(judge_throttle(window({{"thermal", 0.5}}, std::nullopt), 0).flagged);
  // No counters: the hardware/thermal reason bits, then the clock drop.
  ThrottleWindow w;
  w.window_s = 1;
  w.hard_reasons = true;
  w.sm_mhz_min = 1000;
  EXPECT_TRUE(judge_throttle(w, 1980).flagged);
  w.sm_mhz_min = 1970;
  EXPECT_FALSE(judge_throttle(w, 1980).flagged);
  w.hard_reasons = false;
  w.sm_mhz_min = 1000;
  EXPECT_FALSE(judge_throttle(w, 1980).flagged);
}

TEST(Throttle, GroupsOfOnePointMerge) {
  auto a = window({{"power", 0.1}}, 1900);
  a.clock_source = "nvml_samples";
  auto b = window({{"power", 0.2}, {"thermal", 0.1}}, 1500);
  b.clock_source = "after_samples";
  a.merge(b);
  EXPECT_DOUBLE_EQ(a.window_s, 2.0);
  EXPECT_DOUBLE_EQ(a.held_s.at("power"), 0.3);
  EXPECT_DOUBLE_EQ(a.held_s.at("thermal"), 0.1);
  EXPECT_DOUBLE_EQ(*a.sm_mhz_min, 1500);
  EXPECT_DOUBLE_EQ(*a.sm_mhz_max, 1900);
  EXPECT_EQ(a.clock_source, "mixed");
  const auto j = throttle_json(a, judge_throttle(a, 1980));
  EXPECT_TRUE(j.at("flagged").get<bool>());
  EXPECT_DOUBLE_EQ(j.at("window_s").get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j.at("reference_sm_mhz").get<double>(), 1980);
}
