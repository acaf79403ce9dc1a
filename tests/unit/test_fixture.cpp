// The harness: a wrong kernel result is an error, never a timing; a point
// that cannot run is skipped with its reason; counters come from the formulas.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

#include "bench_test_util.hpp"
#include "fixture.hpp"
#include "phasebench/processes.hpp"
#include "summary.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear.hpp"

using namespace phasebench;

namespace {

class FakeOp : public PreparedOp {
 public:
  explicit FakeOp(bool wrong, std::map<std::string, std::string> notes = {}) : wrong_(wrong), notes_(std::move(notes)) {}
  void run() override { ++runs; }
  void verify() override {
    run();
    if (wrong_) throw VerificationError("fake: 3 of 10 elements differ");
  }
  std::map<std::string, std::string> notes() const override { return notes_; }
  int runs = 0;

 private:
  bool wrong_;
  std::map<std::string, std::string> notes_;
};

class FakeBackend : public Backend {
 public:
  FakeBackend() {
    info_.backend = "fake";
    info_.name = "fake";
    info_.slug = "fake";
    info_.cache_bytes = 1000;  // points of >= 4000 bytes are "beyond the caches"
    ceilings_.add_compute(DType::fp32, {1e12, CeilingSource::measured, "fake"});
    ceilings_.add_bandwidth({1e11, CeilingSource::measured, "fake"});
  }
  const DeviceInfo& device() const override { return info_; }
  Ceilings ceilings() const override { return ceilings_; }
  void measure_ceilings(const std::vector<DType>&) override {}
  bool implements(std::string_view, DType, Impl) const override { return true; }
  bool applies(const OpRequest&) const override { return true; }
  std::optional<std::string> cannot_run(const OpRequest& r) const override {
    if (r.shape["M"] == 999) return std::string("needs 9 GiB, 1 GiB free");
    return std::nullopt;
  }
  std::unique_ptr<PreparedOp> prepare(const OpRequest& r) override {
    auto op = std::make_unique<FakeOp>(r.shape["M"] == 13, notes);
    last = op.get();
    return op;
  }
  Sample time(PreparedOp& op, const TimingOptions& opts) override {
    op.run();
    last_cold_timing = opts.cold_timing;
    const auto i = static_cast<std::size_t>(timed++);
    // Scripted samples and clocks, in turn (the last one repeats), else `seconds`.
    Sample s = how;
    s.seconds = script.empty() ? seconds : script[std::min(i, script.size() - 1)];
    if (!clock_script.empty()) s.sm_mhz = clock_script[std::min(i, clock_script.size() - 1)];
    return s;
  }
  // Groups of samples: counted, and each ends with the scripted window.
  void begin_sample_group() override { ++groups; }
  std::optional<ThrottleWindow> end_sample_group() override { return window; }
  // A fake energy counter: joules_per_run for every run() of the last prepared op.
  EnergyReading energy() override {
    if (!joules_per_run) return {false, 0, "not available: the fake has no counter"};
    return {true, *joules_per_run * (last ? last->runs : 0), ""};
  }
  std::string energy_source() const override { return "fake counter"; }
  void synchronize() override {}
  void profile(PreparedOp&, const std::string&) override {}
  std::string paired_read_method() const override { return "the fake's read kernel"; }
  std::optional<double> paired_read() override {
    ++reads;
    return read_rate;
  }
  void device_cache(std::uint64_t bytes) { info_.cache_bytes = bytes; }
  FakeOp* last = nullptr;
  int timed = 0;
  std::optional<double> read_rate;  // what paired_read() reports (nothing: not offered)
  int reads = 0;
  double seconds = 1e-3;  // what every sample takes
  std::vector<double> script, clock_script;
  std::optional<double> joules_per_run;
  Sample how;  // method, runs, rotating bytes of every sample
  std::optional<ColdTiming> last_cold_timing;
  int groups = 0;
  std::optional<ThrottleWindow> window;
  std::map<std::string, std::string> notes;  // what every prepared op says of itself

 private:
  DeviceInfo info_;
  Ceilings ceilings_;
};

Point point(std::uint64_t M) {
  Point p;
  p.name = "free/linear/test" + std::to_string(M);
  p.phase = "free";
  p.op = "linear";
  p.request = linear_request({M, 1000, 1000}, DType::fp32, Impl::own);
  p.cost = p.request.cost();
  return p;
}

}  // namespace

class FixtureTest : public ::testing::Test {
 protected:
  void run_points(const std::vector<Point>& pts) { test::run_points_quietly(*ctx, pts); }
  FakeBackend backend;
  std::unique_ptr<BenchContext> ctx = std::make_unique<BenchContext>(backend, RunOptions{});
};

TEST_F(FixtureTest, WrongResultIsAnErrorNeverATiming) {
  run_points({point(13)});
  const auto* o = ctx->outcome("free/linear/test13");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->status, "error");
  EXPECT_NE(o->message.find("verification failed"), std::string::npos);
  EXPECT_TRUE(o->samples.empty());
  EXPECT_EQ(backend.timed, 0);
  const auto j = ctx->point_json("free/linear/test13");
  EXPECT_EQ(j.at("status"), "error");
  EXPECT_FALSE(j.contains("tflops"));
  EXPECT_FALSE(j.contains("time"));
}

TEST_F(FixtureTest, PointThatCannotRunIsSkippedWithTheReason) {
  run_points({point(999), point(4)});
  EXPECT_EQ(ctx->outcome("free/linear/test999")->status, "skipped");
  EXPECT_NE(ctx->outcome("free/linear/test999")->message.find("9 GiB"), std::string::npos);
  EXPECT_EQ(ctx->outcome("free/linear/test4")->status, "ok");  // the run goes on
  EXPECT_TRUE(ctx->errored_points().empty()) << "a skipped point is not an error (exit status 0)";
}

TEST_F(FixtureTest, ErroredPointsSetTheExitStatus) {
  run_points({point(4), point(13), point(999)});
  // Only the wrong result is an error; `phasebench run` exits 1 when there is any.
  EXPECT_EQ(ctx->errored_points(), std::vector<std::string>{"free/linear/test13"});
}

TEST_F(FixtureTest, CountersComeFromTheFormulas) {
  run_points({point(4)});
  const auto j = ctx->point_json("free/linear/test4");
  ASSERT_EQ(j.at("status"), "ok");
  // 2*4*1000*1000 FLOPs in 1 ms.
  EXPECT_EQ(j.at("flops").get<std::uint64_t>(), 8000000u);
  EXPECT_NEAR(j.at("tflops").get<double>(), 8e6 / 1e-3 / 1e12, 1e-12);
  const std::uint64_t bytes = 4ull * (1000 * 1000 + 4 * 1000 + 4 * 1000);
  EXPECT_EQ(j.at("bytes").at("total").get<std::uint64_t>(), bytes);
  EXPECT_NEAR(j.at("gbps").get<double>(), bytes / 1e-3 / 1e9, 1e-9);
  // Intensity ~1.98 < ridge 10: memory-bound; fraction = achieved / (I*W).
  EXPECT_EQ(j.at("bound"), "memory");
  const double I = 8e6 / bytes;
  EXPECT_NEAR(j.at("fraction_of_roofline").get<double>(), (8e6 / 1e-3) / (I * 1e11), 1e-9);
  EXPECT_EQ(j.at("roofline").at("bandwidth_ceiling_source"), "measured");
  EXPECT_DOUBLE_EQ(j.at("time").at("median_s").get<double>(), 1e-3);
}

TEST_F(FixtureTest, LargeMemoryBoundPointsPairEverySampleWithARead) {
  backend.read_rate = 4e10;  // 40 GB/s at the moment of each sample
  run_points({point(4), point(1000)});
  // M=4: ~4 MB, intensity ~2 < ridge 10: one read before each sample.
  const auto* o = ctx->outcome("free/linear/test4");
  ASSERT_EQ(o->status, "ok");
  EXPECT_EQ(o->paired_fraction.size(), o->samples.size());
  const auto j = ctx->point_json("free/linear/test4");
  ASSERT_TRUE(j.contains("paired_read")) << j.dump(1);
  const double bytes = 4.0 * (1000 * 1000 + 4 * 1000 + 4 * 1000);
  EXPECT_NEAR(j.at("paired_read").at("fraction_median").get<double>(), bytes / 1e-3 / 4e10, 1e-12);
  EXPECT_DOUBLE_EQ(j.at("paired_read").at("read_bytes_per_s_median").get<double>(), 4e10);
  EXPECT_EQ(j.at("paired_read").at("read"), "the fake's read kernel");  // the backend says which read it paired
  // Beside it the fraction of the run's ceiling (100 GB/s) is unchanged.
  EXPECT_NEAR(j.at("roofline").at("bandwidth_bytes_per_s").get<double>(), 1e11, 1);
  // M=1000: compute-bound (intensity ~167): no reads for its samples.
  EXPECT_FALSE(ctx->point_json("free/linear/test1000").contains("paired_read"));
  EXPECT_EQ(backend.reads, static_cast<int>(o->samples.size()));
}

TEST_F(FixtureTest, NoPairedReadsForSmallPointsHotCachesOrWhenSwitchedOff) {
  backend.read_rate = 4e10;
  backend.device_cache(1u << 30);  // a 1 GiB cache: the 4 MB point is small
  run_points({point(4)});
  EXPECT_EQ(backend.reads, 0);
  backend.device_cache(1000);
  RunOptions hot;
  hot.cold_cache = false;  // a read before a hot sample would evict its data
  ctx = std::make_unique<BenchContext>(backend, hot);
  run_points({point(4)});
  EXPECT_EQ(backend.reads, 0);
  RunOptions off;
  off.paired_read = false;
  ctx = std::make_unique<BenchContext>(backend, off);
  run_points({point(4)});
  EXPECT_EQ(backend.reads, 0);
  backend.read_rate.reset();  // a backend that does not offer it
  ctx = std::make_unique<BenchContext>(backend, RunOptions{});
  run_points({point(4)});
  EXPECT_GT(backend.reads, 0);
  EXPECT_FALSE(ctx->point_json("free/linear/test4").contains("paired_read"));
}

// A prepared op's notes (a library's version, the engine it chose) go to the
// point's impl_detail as they are, also when the point then fails verification;
// an op with none adds no member.
TEST_F(FixtureTest, WhatTheOpSaysOfItselfIsTheImplDetail) {
  run_points({point(4)});
  EXPECT_FALSE(ctx->point_json("free/linear/test4").contains("impl_detail"));
  backend.notes = {{"library", "fakeDNN"}, {"engine", "eng7_k2=1"}};
  ctx = std::make_unique<BenchContext>(backend, RunOptions{});
  run_points({point(4), point(13)});
  for (const char* name : {"free/linear/test4", "free/linear/test13"}) {
    const auto j = ctx->point_json(name);
    ASSERT_TRUE(j.contains("impl_detail")) << j.dump();
    EXPECT_EQ(j.at("impl_detail").at("library"), "fakeDNN");
    EXPECT_EQ(j.at("impl_detail").at("engine"), "eng7_k2=1");
  }
  EXPECT_EQ(ctx->point_json("free/linear/test13").at("status"), "error");
  // A point skipped before it was prepared has nothing to say.
  run_points({point(999)});
  EXPECT_FALSE(ctx->point_json("free/linear/test999").contains("impl_detail"));
}

TEST(Stats, MedianAndSpread) {
  const auto s = stats_of({3, 1, 2, 10});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.mean, 4);
  EXPECT_EQ(s.count, 4u);
  EXPECT_GT(s.cv, 0);
}

TEST_F(FixtureTest, AboveTheRooflineSaysTheLikelyCause) {
  // 4 MB in 10 us is 400 GB/s against a 100 GB/s ceiling: 4x the roofline.
  backend.seconds = 1e-5;
  run_points({point(4)});
  auto j = ctx->point_json("free/linear/test4");
  ASSERT_TRUE(j.contains("above_roofline")) << j.dump();
  EXPECT_GT(j.at("above_roofline").at("fraction").get<double>(), 1.0);
  EXPECT_NE(j.at("above_roofline").at("likely_cause").get<std::string>().find("ceiling low"), std::string::npos);
  // The same point within the caches: the cause is the caches.
  backend.device_cache(1ull << 30);
  ctx = std::make_unique<BenchContext>(backend, RunOptions{});
  run_points({point(4)});
  j = ctx->point_json("free/linear/test4");
  EXPECT_NE(j.at("above_roofline").at("likely_cause").get<std::string>().find("data cached: the point moves less"),
            std::string::npos);
  // Hot cache.
  RunOptions hot;
  hot.cold_cache = false;
  ctx = std::make_unique<BenchContext>(backend, hot);
  run_points({point(4)});
  j = ctx->point_json("free/linear/test4");
  EXPECT_NE(j.at("above_roofline").at("likely_cause").get<std::string>().find("hot-cache"), std::string::npos);
  // At a plausible speed, nothing to explain.
  backend.seconds = 1e-3;
  ctx = std::make_unique<BenchContext>(backend, RunOptions{});
  run_points({point(4)});
  EXPECT_FALSE(ctx->point_json("free/linear/test4").contains("above_roofline"));
}

TEST_F(FixtureTest, EveryPointHasAtLeastFiveSamples) {
  // One sample of a second satisfies Google Benchmark's minimum time at once;
  // a median still needs more than one.
  backend.seconds = 1.0;
  run_points({point(1000)});
  const auto* o = ctx->outcome("free/linear/test1000");
  ASSERT_EQ(o->status, "ok");
  EXPECT_GE(o->samples.size(), kMinSamplesPerPoint);
  EXPECT_EQ(ctx->point_json("free/linear/test1000").at("time").at("samples"), o->samples.size());
}

TEST_F(FixtureTest, PairedFractionAboveTheReadIsSuspectNotAResult) {
  // A machine whose LLC is large (1000 bytes here, against 4 MB points) and a
  // paired read that reports 1 GB/s (a cold read): the 4 MB point in 1 ms is
  // 4 GB/s, "400% of the read".
  backend.read_rate = 1e9;
  run_points({point(4)});
  const auto j = ctx->point_json("free/linear/test4");
  ASSERT_TRUE(j.contains("paired_read")) << j.dump(1);
  EXPECT_EQ(j.at("paired_read").at("suspect"), true);
  EXPECT_TRUE(j.at("paired_read").contains("why_suspect"));
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 2}}}}},
                        {"benchmarks", {{{"name", "free/linear/test4"}, {"run_name", "free/linear/test4"},
                                         {"run_type", "iteration"}, {"phasebench", j}}}}};
  const auto s = summarize(doc);
  EXPECT_NE(s.find("note: free linear own: 1 point(s) above 105% of their paired read, left out as suspect"),
            std::string::npos)
      << s;
  // A plausible read (40 GB/s: the point is at 10% of it) is not suspect.
  backend.read_rate = 4e10;
  ctx = std::make_unique<BenchContext>(backend, RunOptions{});
  run_points({point(4)});
  EXPECT_EQ(ctx->point_json("free/linear/test4").at("paired_read").at("suspect"), false);
}

TEST(Stats, RelativeNoiseIsARobustSpread) {
  EXPECT_DOUBLE_EQ(relative_noise({}), 0);
  EXPECT_DOUBLE_EQ(relative_noise({5}), 0);
  EXPECT_DOUBLE_EQ(relative_noise({2, 2, 2, 2, 2}), 0);
  // Quartiles of 1..5 are 2 and 4, the median 3: (4 - 2) / 1.349 / 3.
  EXPECT_NEAR(relative_noise({5, 1, 4, 2, 3}), 2 / 1.349 / 3, 1e-12);
  // One preempted sample among steady ones moves it little (stddev/mean would be ~2).
  EXPECT_LT(relative_noise({1, 1, 1, 1, 1, 1, 1, 1.001, 1.001, 50}), 0.002);
}

TEST_F(FixtureTest, SamplingStopsWhenTheNoiseIsLowEnough) {
  // Noisy at first (a machine settling), then steady: it stops once the
  // spread of its samples falls under 1%, not after a fixed time.
  backend.script = {1e-3, 3e-3, 0.5e-3, 2e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3};
  RunOptions o;
  o.stop.max_noise = 0.01;
  ctx = std::make_unique<BenchContext>(backend, o);
  run_points({point(4)});
  const auto* out = ctx->outcome("free/linear/test4");
  ASSERT_EQ(out->status, "ok");
  // The first 5 have quartiles 1 and 2 ms: noise 0.74. Each steady sample
  // pulls the upper quartile down (0.56, 0.37, 0.19); at 9 samples (sorted:
  // 0.5, six of 1, 2, 3) both quartiles are 1 ms.
  EXPECT_EQ(out->samples.size(), 9u);
  EXPECT_EQ(out->converged, true);
  EXPECT_EQ(out->stop_reason, "converged");
  const auto j = ctx->point_json("free/linear/test4");
  EXPECT_EQ(j.at("time").at("converged"), true);
  EXPECT_EQ(j.at("time").at("samples_s").size(), 9u);
  EXPECT_DOUBLE_EQ(j.at("time").at("samples_s")[1].get<double>(), 3e-3);
  EXPECT_DOUBLE_EQ(j.at("time").at("noise").get<double>(), 0.0);
}

TEST_F(FixtureTest, SamplingStopsAtTheTimeCapUnconverged) {
  // Alternating samples never settle: the point stops at its time cap, says so,
  // and still has its samples and median.
  for (int i = 0; i < 100000; ++i) backend.script.push_back(i % 2 ? 1e-3 : 2e-3);
  RunOptions o;
  o.stop.max_noise = 0.01;
  o.stop.max_time_s = 0.02;
  ctx = std::make_unique<BenchContext>(backend, o);
  run_points({point(4)});
  const auto* out = ctx->outcome("free/linear/test4");
  ASSERT_EQ(out->status, "ok");
  EXPECT_EQ(out->converged, false);
  EXPECT_EQ(out->stop_reason, "max_time");
  EXPECT_GE(out->samples.size(), kMinSamplesPerPoint);
  EXPECT_GT(out->noise, 0.01);
  const auto j = ctx->point_json("free/linear/test4");
  EXPECT_EQ(j.at("time").at("converged"), false);
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 3},
                                                     {"stopping", {{"rule", "noise"}, {"max_noise", 0.01}, {"max_time_s", 0.02}}}}}}},
                        {"benchmarks", {{{"name", "free/linear/test4"}, {"run_name", "free/linear/test4"},
                                         {"run_type", "iteration"}, {"phasebench", j}}}}};
  const auto s = summarize(doc);
  EXPECT_NE(s.find("sampling: 0 of 1 points converged"), std::string::npos) << s;
  EXPECT_NE(s.find("1 did not"), std::string::npos) << s;
}

namespace {

// A second rank as the sampling loop sees it through Processes: its samples are
// twice this rank's (the slower GPU), and it wants to stop at the time cap when
// `peer_time_up` is set; every collective call is counted.
class TwoRanks : public Processes {
 public:
  int size() const override { return 2; }
  double max(double v) override {
    ++calls;
    return std::max(v, 2 * v);
  }
  bool any(bool v) override {
    ++calls;
    return v || (peer_time_up && ++anys > 12);
  }
  bool peer_time_up = false;
  int calls = 0, anys = 0;
};

}  // namespace

TEST_F(FixtureTest, UnderMpirunEachSampleIsTheSlowestRanksAndTheRanksStopTogether) {
  auto two = std::make_unique<TwoRanks>();
  TwoRanks* ranks = two.get();
  set_processes(std::move(two));
  RunOptions o;
  o.stop.max_noise = 0.01;
  ctx = std::make_unique<BenchContext>(backend, o);
  run_points({point(4)});
  const auto* out = ctx->outcome("free/linear/test4");
  ASSERT_EQ(out->status, "ok");
  ASSERT_FALSE(out->samples.empty());
  for (double x : out->samples) EXPECT_DOUBLE_EQ(x, 2e-3) << "the slower rank's 2 ms, not this rank's 1 ms";
  EXPECT_GT(ranks->calls, 0);
  // The other rank's time is up (this one's is not): both stop at the same sample, unconverged.
  for (int i = 0; i < 100000; ++i) backend.script.push_back(i % 2 ? 1e-3 : 2e-3);
  ranks->peer_time_up = true;
  o.stop.max_time_s = 1e6;
  ctx = std::make_unique<BenchContext>(backend, o);
  run_points({point(4)});
  out = ctx->outcome("free/linear/test4");
  set_processes(nullptr);
  ASSERT_EQ(out->status, "ok");
  EXPECT_EQ(out->stop_reason, "max_time");
  EXPECT_LT(out->samples.size(), 100u);
}

TEST_F(FixtureTest, MinSamplesIsHonouredAndNeverBelowFive) {
  RunOptions o;
  o.stop.min_samples = 12;
  ctx = std::make_unique<BenchContext>(backend, o);
  run_points({point(4)});
  EXPECT_EQ(ctx->outcome("free/linear/test4")->samples.size(), 12u);  // steady: stops at the minimum
  o.stop.min_samples = 1;
  ctx = std::make_unique<BenchContext>(backend, o);
  run_points({point(4)});
  EXPECT_EQ(ctx->outcome("free/linear/test4")->samples.size(), kMinSamplesPerPoint);
}

TEST_F(FixtureTest, SamplesAtALowClockAreSetAsideAndRetaken) {
  // SM clocks after each sample: the third and fourth fell to 900 MHz (below
  // 75% of the run's 1980): those samples (5 ms, a throttled GPU) are retaken.
  backend.script = {1e-3, 1e-3, 5e-3, 5e-3, 1e-3};
  backend.clock_script = {1980, 1980, 900, 900, 1980};
  run_points({point(4)});
  const auto* out = ctx->outcome("free/linear/test4");
  ASSERT_EQ(out->status, "ok");
  EXPECT_EQ(out->rejected_low_clock, 2u);
  EXPECT_DOUBLE_EQ(out->rejected_min_mhz, 900);
  EXPECT_EQ(out->samples.size(), kMinSamplesPerPoint);
  for (double s : out->samples) EXPECT_DOUBLE_EQ(s, 1e-3);
  const auto j = ctx->point_json("free/linear/test4");
  EXPECT_EQ(j.at("clock_check").at("rejected_samples"), 2);
  EXPECT_DOUBLE_EQ(j.at("clock_check").at("run_max_sm_mhz").get<double>(), 1980);
}

TEST_F(FixtureTest, HowSamplesWereTimedIsInTheResults) {
  backend.how.method = "rotating_graph";
  backend.how.runs = 16;
  backend.how.rotating_bytes = 16 * 12000;
  run_points({point(4)});
  auto j = ctx->point_json("free/linear/test4");
  EXPECT_EQ(j.at("time").at("method"), "rotating_graph");
  EXPECT_EQ(j.at("time").at("rotating_copies"), 16);
  EXPECT_EQ(j.at("time").at("rotating_bytes"), 16 * 12000);
  EXPECT_EQ(j.at("time").at("runs_per_sample"), 16);
  EXPECT_FALSE(j.at("time").contains("why_single"));
  EXPECT_EQ(backend.last_cold_timing, ColdTiming::rotate);  // the default reaches the backend
  auto doc_of = [](const nlohmann::json& pj) {
    return nlohmann::json{{"context", {{"phasebench", {{"schema_version", 3}}}}},
                          {"benchmarks", {{{"name", "p"}, {"run_name", "p"}, {"run_type", "iteration"}, {"phasebench", pj}}}}};
  };
  const auto summary = summarize(doc_of(j));
  EXPECT_NE(summary.find("timing: 1 rotating_graph (16-16 copies, time / copies)"), std::string::npos) << summary;

  RunOptions single;
  single.cold_timing = ColdTiming::single;
  ctx = std::make_unique<BenchContext>(backend, single);
  backend.how = Sample{};
  backend.how.why_single = "--cold-timing single";
  run_points({point(5)});
  j = ctx->point_json("free/linear/test5");
  EXPECT_EQ(j.at("time").at("method"), "single");
  EXPECT_FALSE(j.at("time").contains("rotating_copies"));
  EXPECT_EQ(j.at("time").at("why_single"), "--cold-timing single");
  EXPECT_EQ(backend.last_cold_timing, ColdTiming::single);
}

TEST_F(FixtureTest, ThrottledOnlyWhenALimiterHeldTheClocksDown) {
  // The power limiter held the clocks for half the window but they stayed at
  // the run's highest: reported, not flagged (routine under heavy GEMMs).
  backend.clock_script = {1980};
  ThrottleWindow w;
  w.window_s = 0.2;
  w.counters = true;
  w.held_s = {{"power", 0.1}, {"thermal", 0.0}};
  w.sm_mhz_min = 1960;
  w.sm_mhz_max = 1980;
  w.clock_source = "nvml_samples";
  backend.window = w;
  run_points({point(4)});
  auto j = ctx->point_json("free/linear/test4");
  EXPECT_GE(backend.groups, 1);
  EXPECT_FALSE(j.at("throttled").get<bool>());
  EXPECT_FALSE(j.at("throttle").at("flagged").get<bool>());
  EXPECT_NE(j.at("throttle").at("why").get<std::string>().find("not flagged"), std::string::npos) << j.at("throttle");
  EXPECT_DOUBLE_EQ(j.at("throttle").at("held_s").at("power").get<double>(), 0.1 * backend.groups);
  EXPECT_EQ(j.at("throttle").at("clock_source"), "nvml_samples");

  // Thermal slowdown and clocks that fell to 1500 MHz: flagged.
  w.held_s = {{"power", 0.0}, {"thermal", 0.05}};
  w.sm_mhz_min = 1500;
  backend.window = w;
  run_points({point(5)});
  j = ctx->point_json("free/linear/test5");
  EXPECT_TRUE(j.at("throttled").get<bool>()) << j.at("throttle");
  EXPECT_NE(j.at("throttle").at("why").get<std::string>().find("thermal"), std::string::npos) << j.at("throttle");
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 3}}}}},
                        {"benchmarks", {{{"name", "p"}, {"run_name", "p"}, {"run_type", "iteration"}, {"phasebench", j}}}}};
  EXPECT_NE(summarize(doc).find("throttled: 1 points ran with clocks a limiter held down"), std::string::npos)
      << summarize(doc);

  // A point prepared again (Google Benchmark's interleaved repetitions) keeps the
  // limiters of its earlier groups, as it keeps its samples.
  w.held_s = {{"power", 0.1}};
  backend.window = w;
  const int before = backend.groups;
  run_points({point(7)});
  const int groups7 = backend.groups - before;
  run_points({point(8)});  // another point between, so that point 7 is prepared again
  const int mid = backend.groups;
  run_points({point(7)});
  const int all7 = groups7 + (backend.groups - mid);
  ASSERT_GT(backend.groups, mid);
  j = ctx->point_json("free/linear/test7");
  EXPECT_DOUBLE_EQ(j.at("throttle").at("held_s").at("power").get<double>(), 0.1 * all7) << j.at("throttle");
  EXPECT_DOUBLE_EQ(j.at("throttle").at("window_s").get<double>(), 0.2 * all7);

  // A backend that cannot tell (the CPU, the emulation): no block, not throttled.
  backend.window.reset();
  run_points({point(6)});
  j = ctx->point_json("free/linear/test6");
  EXPECT_FALSE(j.at("throttled").get<bool>());
  EXPECT_FALSE(j.contains("throttle"));
}

TEST_F(FixtureTest, TheThrottleVerdictIsTheOneOfItsOwnTime) {
  // Point 4 ran at 1600 MHz, the highest of the run then, with a thermal limit
  // and a low of 1500 (94%): not flagged. A later point at 1980 MHz does not
  // change what the results say of point 4, in the flag or in its block.
  backend.clock_script = {1600};
  ThrottleWindow w;
  w.window_s = 0.2;
  w.counters = true;
  w.held_s = {{"thermal", 0.05}};
  w.sm_mhz_min = 1500;
  w.sm_mhz_max = 1600;
  backend.window = w;
  run_points({point(4)});
  backend.clock_script = {1980};
  backend.window.reset();
  run_points({point(5)});
  const auto j = ctx->point_json("free/linear/test4");
  EXPECT_FALSE(j.at("throttled").get<bool>()) << j.at("throttle");
  EXPECT_FALSE(j.at("throttle").at("flagged").get<bool>()) << j.at("throttle");
  EXPECT_DOUBLE_EQ(j.at("throttle").at("reference_sm_mhz").get<double>(), 1600);
}

TEST_F(FixtureTest, EnergyComesFromTheCounterAroundBackToBackRuns) {
  backend.joules_per_run = 0.25;
  RunOptions o;
  o.energy_window_s = 0.01;
  ctx = std::make_unique<BenchContext>(backend, o);
  run_points({point(4)});
  const auto* out = ctx->outcome("free/linear/test4");
  ASSERT_TRUE(out->energy.has_value());
  EXPECT_GT(out->energy->runs, 0u);
  EXPECT_DOUBLE_EQ(out->energy->joules, 0.25 * static_cast<double>(out->energy->runs));
  auto p = point(4);
  const auto j = ctx->point_json("free/linear/test4").at("energy");
  EXPECT_DOUBLE_EQ(j.at("joules_per_run").get<double>(), 0.25);
  const double bytes = static_cast<double>(p.cost.bytes.total());
  EXPECT_DOUBLE_EQ(j.at("joules_per_byte").get<double>(), 0.25 / bytes);
  EXPECT_TRUE(j.at("joules_per_token").is_null()) << "a free shape has no tokens";
  // Without a counter: no energy in the point, and no made-up number.
  backend.joules_per_run.reset();
  ctx = std::make_unique<BenchContext>(backend, o);
  run_points({point(4)});
  EXPECT_FALSE(ctx->outcome("free/linear/test4")->energy.has_value());
  EXPECT_FALSE(ctx->point_json("free/linear/test4").contains("energy"));
}

TEST_F(FixtureTest, EnergyPerTokenCountsThePointsTokens) {
  backend.joules_per_run = 2.0;
  RunOptions o;
  o.energy_window_s = 0.005;
  ctx = std::make_unique<BenchContext>(backend, o);
  auto p = point(64);
  p.name = "prefill/linear/test";
  p.phase = "prefill";
  p.args = {{"batch", 2}, {"prompt", 32}};
  run_points({p});
  const auto j = ctx->point_json("prefill/linear/test").at("energy");
  EXPECT_EQ(j.at("tokens_per_run"), 64);
  EXPECT_DOUBLE_EQ(j.at("joules_per_token").get<double>(), 2.0 / 64);
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 3}, {"energy", {{"available", true}, {"source", "fake counter"}}}}}}},
                        {"benchmarks", {{{"name", "prefill/linear/test"}, {"run_name", "prefill/linear/test"},
                                         {"run_type", "iteration"}, {"phasebench", ctx->point_json("prefill/linear/test")}}}}};
  const auto s = summarize(doc);
  EXPECT_NE(s.find("energy (fake counter"), std::string::npos) << s;
  EXPECT_NE(s.find("0.0312"), std::string::npos) << s;  // 2 J / 64 tokens
  doc["context"]["phasebench"]["energy"] = {{"available", false}, {"why", "not available: no RAPL here"}};
  EXPECT_NE(summarize(doc).find("energy: not available: no RAPL here"), std::string::npos);
}

TEST(Summary, Fp8CacheAgainstTheWiderCacheOnTheSameShapes) {
  // Two decode attention points of one shape, the second over an fp8 cache
  // (kv_bits:8) and 1.8x faster; a third, paged, with no fp8 twin.
  auto point = [](const std::string& op, double t, std::uint64_t kv_bits, std::uint64_t page) {
    nlohmann::json args = {{"batch", 8}, {"context", 4096}};
    if (kv_bits) args["kv_bits"] = kv_bits;
    if (page) args["page_size"] = page;
    nlohmann::json p = {{"phase", "decode"}, {"op", op}, {"model", "m"}, {"dtype", "bf16"}, {"cache", "cold"},
                        {"status", "ok"}, {"args", args},
                        {"shape", {{"B", 8}, {"Hq", 32}, {"Hkv", 8}, {"L", 4096}, {"D", 128}}},
                        {"time", {{"median_s", t}}}, {"roofline", {{"fraction_of_roofline", 0.5}}}};
    const std::string name = "decode/" + op + "/m/bf16/" + std::to_string(kv_bits) + "/" + std::to_string(page);
    return nlohmann::json{{"name", name}, {"run_name", name}, {"run_type", "iteration"}, {"phasebench", p}};
  };
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 3}}}}},
                        {"benchmarks", {point("decode_attention", 1.8e-3, 0, 0), point("decode_attention", 1.0e-3, 8, 0),
                                        point("decode_attention_paged", 2.0e-3, 0, 16)}}};
  const auto s = summarize(doc);
  EXPECT_NE(s.find("fp8 cache vs the run's dtype"), std::string::npos) << s;
  EXPECT_NE(s.find("contiguous        1    1.80x"), std::string::npos) << s;
  EXPECT_EQ(s.find("page 16"), std::string::npos) << "no fp8 twin, no row: " << s;
  // The fp8 point is not taken for the 16-bit one in the paged-vs-contiguous line.
  EXPECT_NE(s.find("16              1     1.11"), std::string::npos) << s;
}
