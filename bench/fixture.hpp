#pragma once
// The benchmark body every point runs (Google Benchmark, manual time): prepare
// the operation outside timing, verify it against the CPU reference, warm up,
// then time samples through the backend. Results per point go to a registry the
// results writer reads.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "backend.hpp"
#include "sweep.hpp"

namespace phasebench {

// Every point that runs has at least this many samples, whatever
// --benchmark_min_time or --min-samples say (one slow sample is not a median).
inline constexpr std::size_t kMinSamplesPerPoint = 5;
// A paired fraction above this is not a result: the point moved more bytes per
// second than a streaming read timed just before it (a cold read, or a cache effect).
inline constexpr double kPairedSuspectAbove = 1.05;

// How many samples a point takes. By noise (nvbench's idea): sample until the
// relative spread of the samples is at most max_noise, with at least
// min_samples, and stop at max_time_s (wall time of the sampling, flushes and
// paired reads included) unconverged. Otherwise Google Benchmark's
// --benchmark_min_time loop decides, topped up to min_samples.
struct StopRule {
  bool by_noise = true;
  double max_noise = 0.005;  // relative (0.5%)
  std::size_t min_samples = kMinSamplesPerPoint;
  double max_time_s = 5.0;
};

// The relative spread of samples: the interquartile range over 1.349 x the
// median, an estimate of stddev/mean that one outlier (a preempted sample on a
// shared machine) does not inflate. 0 for fewer than two samples.
double relative_noise(std::vector<double> samples);

// Samples at an SM clock below this fraction of the run's highest reading are
// set aside (nvbench's clock-ratio check) and retaken, at most kMaxRejectedPerPoint per point.
inline constexpr double kDefaultClockRatio = 0.75;
inline constexpr std::size_t kMaxRejectedPerPoint = 50;

// A point's identity and cost as its results entry records them (phase, op,
// op_kind, model, target, dtype, impl, args, shape, flops, bytes, intensity).
nlohmann::json point_identity_json(const Point& p);

struct PointOutcome {
  std::string status = "not run";  // ok | skipped | error
  std::string message;
  std::vector<double> samples;  // seconds per run(), every timed sample of the point
  std::uint64_t runs_per_sample = 1;
  // How the samples were timed (Sample::method, rotating_bytes, why_single).
  std::string timing_method = "single";
  std::uint64_t rotating_bytes = 0;
  std::string why_single;
  // What the limiters and clocks did over the point's groups of samples, and
  // the verdict (judge_throttle against the run's highest SM clock then).
  std::optional<ThrottleWindow> throttle;
  ThrottleVerdict throttle_verdict;
  bool throttled() const { return throttle_verdict.flagged; }
  nlohmann::json clocks;  // clocks seen at the end of the point
  // Paired reads (large memory-bound points): per sample, its bytes/s over the
  // bytes/s of the streaming read timed right before it.
  std::vector<double> paired_fraction;
  std::vector<double> paired_read;  // the reads' bytes/s
  // The stopping rule's verdict (every call of the point converged) and the
  // noise of the last call's samples; why it stopped.
  std::optional<bool> converged;  // nothing under Google Benchmark's loop
  double noise = 0;
  std::string stop_reason;
  // Samples set aside for a low SM clock, and the lowest clock among them.
  std::size_t rejected_low_clock = 0;
  double rejected_min_mhz = 0;
  // Energy over a window of back-to-back runs after the samples (when the backend has a counter).
  struct Energy {
    double joules = 0, seconds = 0;
    std::uint64_t runs = 0;
  };
  std::optional<Energy> energy;
  std::string energy_error;  // why the window failed, when it was tried
  // What the prepared op says of itself (PreparedOp::notes): the JSON's impl_detail.
  std::map<std::string, std::string> impl_detail;
};

struct RunOptions {
  bool cold_cache = true;
  ColdTiming cold_timing = ColdTiming::rotate;  // cold short launches on a GPU (timing.hpp)
  CeilingSource ceiling = CeilingSource::measured;
  // Time a streaming read before every sample of memory-bound points that move
  // beyond the caches (cold cache only; where the backend can).
  bool paired_read = true;
  StopRule stop;
  double clock_ratio = kDefaultClockRatio;
  // Seconds of back-to-back runs per point over which the energy counter is
  // read (0: no energy); only where the backend has a counter.
  double energy_window_s = 0.5;
  // What the run warns of before it measures (contexts beyond a model's
  // max_position_embeddings); the results' context.phasebench.warnings.
  std::vector<std::string> warnings;
};

class BenchContext {
 public:
  BenchContext(Backend& backend, RunOptions opts) : backend_(backend), opts_(opts) {}
  Backend& backend() { return backend_; }
  const RunOptions& options() const { return opts_; }
  // The Google Benchmark function of a point.
  void run(benchmark::State& st, const Point& p);
  const PointOutcome* outcome(const std::string& name) const;
  const Point* point(const std::string& name) const;
  void add_point(const Point& p) { points_[p.name] = p; }
  const std::map<std::string, Point>& points() const { return points_; }
  // The structured phasebench fields of a point, for the results file.
  nlohmann::json point_json(const std::string& name) const;
  // The points that ended in an error (a wrong result, a failed launch): the
  // run's exit status is 1 when there is any. Skipped points are not errors.
  std::vector<std::string> errored_points() const;

 private:
  // Whether samples of this point get a paired read (see RunOptions::paired_read).
  bool pairs_reads(const Point& p) const;
  // The steps of run(): prepare, verify and warm up a point once (keeping the
  // samples it has); time Google Benchmark's iterations into its pool (false on
  // an error); the counters and label of the median sample. take_sample() is
  // one sample (a paired read when `pair`, the timed run, the clock check): false
  // when it was set aside.
  void prepare_point(const Point& p, PointOutcome& out);
  bool time_samples(benchmark::State& st, const Point& p, PointOutcome& out);
  bool take_sample(const Point& p, bool pair, PointOutcome& out, std::vector<double>& call_samples);
  void set_counters(benchmark::State& st, const Point& p, const PointOutcome& out) const;
  // Why a point's fraction of roofline is above 1: its data was cached, or the
  // ceiling it is measured against is low (results: above_roofline.likely_cause).
  std::string above_roofline_cause(Bound bound, const Ceiling& P, const Ceiling& W, std::uint64_t bytes, DType dtype) const;
  Backend& backend_;
  RunOptions opts_;
  std::map<std::string, Point> points_;
  std::map<std::string, PointOutcome> outcomes_;
  // The prepared op is kept across Google Benchmark's repeated calls of one
  // point (it calls the function again while it sizes the iteration count).
  std::string current_;
  std::unique_ptr<PreparedOp> op_;
  std::string prepare_error_;
  double run_max_mhz_ = 0;  // the highest SM clock read in this run
  // The energy window of a point (PointOutcome::energy), after its samples.
  void measure_energy(PointOutcome& out);
};

// Statistics of a list of samples.
struct SampleStats {
  double median = 0, mean = 0, min = 0, max = 0, stddev = 0, cv = 0;
  std::size_t count = 0;
};
SampleStats stats_of(std::vector<double> samples);
// A point's rates from its FLOPs or bytes and its median time (the counters and the JSON).
inline double tflops(double flops, double seconds) { return flops / seconds / 1e12; }
inline double gbps(double bytes, double seconds) { return bytes / seconds / 1e9; }

// Register every point with Google Benchmark (manual time, named as the point).
void register_points(BenchContext& ctx, const std::vector<Point>& points);

}  // namespace phasebench
