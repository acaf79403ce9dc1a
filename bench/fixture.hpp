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
// --benchmark_min_time lets Google Benchmark stop at (one slow sample is not a
// median). The extra ones are taken right after its timing loop, the same way.
inline constexpr std::size_t kMinSamplesPerPoint = 5;
// A paired fraction above this is not a result: the point moved more bytes per
// second than a streaming read timed just before it (a cold read, or a cache effect).
inline constexpr double kPairedSuspectAbove = 1.05;

struct PointOutcome {
  std::string status = "not run";  // ok | skipped | error
  std::string message;
  std::vector<double> samples;  // seconds per run(), every timed sample of the point
  std::uint64_t runs_per_sample = 1;
  bool throttled = false;
  nlohmann::json clocks;  // clocks seen at the end of the point
  // Paired reads (large memory-bound points): per sample, its bytes/s over the
  // bytes/s of the streaming read timed right before it.
  std::vector<double> paired_fraction;
  std::vector<double> paired_read;  // the reads' bytes/s
};

struct RunOptions {
  bool cold_cache = true;
  CeilingSource ceiling = CeilingSource::measured;
  // Time a streaming read before every sample of memory-bound points that move
  // beyond the caches (cold cache only; where the backend can).
  bool paired_read = true;
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
  // an error); the counters and label of the median sample.
  void prepare_point(const Point& p, PointOutcome& out);
  bool time_samples(benchmark::State& st, const Point& p, PointOutcome& out);
  void set_counters(benchmark::State& st, const Point& p, const PointOutcome& out) const;
  // Why a point's fraction of roofline is above 1: its data was cached, or the
  // ceiling it is measured against is low (results: above_roofline.likely_cause).
  std::string above_roofline_cause(Bound bound, const Ceiling& P, const Ceiling& W, std::uint64_t bytes, DType dtype) const;
  // The "layer" block of a whole-layer point (measured and predicted step times).
  nlohmann::json layer_json(const Point& p, double measured_layer_s) const;
  Backend& backend_;
  RunOptions opts_;
  std::map<std::string, Point> points_;
  std::map<std::string, PointOutcome> outcomes_;
  // The prepared op is kept across Google Benchmark's repeated calls of one
  // point (it calls the function again while it sizes the iteration count).
  std::string current_;
  std::unique_ptr<PreparedOp> op_;
  std::string prepare_error_;
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
