// The Google Benchmark fixture every point runs through: prepare and verify once,
// time each sample through the backend (cold or hot cache, paired reads), and the
// point's structured JSON (cost, time statistics, roofline placement, layer step times).
#include "fixture.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "phasebench/error.hpp"
#include "phasebench/json_fields.hpp"
#include "phasebench/processes.hpp"

namespace phasebench {

double relative_noise(std::vector<double> s) {
  const std::size_t n = s.size();
  if (n < 2) return 0;
  std::sort(s.begin(), s.end());
  auto quantile = [&](double f) {  // linear interpolation between order statistics
    const double pos = f * static_cast<double>(n - 1);
    const auto i = static_cast<std::size_t>(pos);
    return i + 1 < n ? s[i] + (s[i + 1] - s[i]) * (pos - static_cast<double>(i)) : s[i];
  };
  const double median = quantile(0.5);
  return median > 0 ? (quantile(0.75) - quantile(0.25)) / 1.349 / median : 0;
}

SampleStats stats_of(std::vector<double> s) {
  SampleStats r;
  r.count = s.size();
  if (s.empty()) return r;
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  r.median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  r.min = s.front();
  r.max = s.back();
  r.mean = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(n);
  double var = 0;
  for (double x : s) var += (x - r.mean) * (x - r.mean);
  r.stddev = n > 1 ? std::sqrt(var / static_cast<double>(n - 1)) : 0.0;
  r.cv = r.mean > 0 ? r.stddev / r.mean : 0.0;
  return r;
}

const PointOutcome* BenchContext::outcome(const std::string& name) const {
  auto it = outcomes_.find(name);
  return it == outcomes_.end() ? nullptr : &it->second;
}

std::vector<std::string> BenchContext::errored_points() const {
  std::vector<std::string> v;
  for (const auto& [name, o] : outcomes_)
    if (o.status == "error") v.push_back(name);
  return v;
}

const Point* BenchContext::point(const std::string& name) const {
  auto it = points_.find(name);
  return it == points_.end() ? nullptr : &it->second;
}

bool BenchContext::pairs_reads(const Point& p) const {
  if (!opts_.paired_read || !opts_.cold_cache) return false;  // a read before a hot sample would evict its data
  const auto& cost = p.cost;
  const auto& r = p.request;
  // Smaller points are served partly by the caches.
  if (!beyond_caches(cost.bytes.total(), backend_.device().cache_bytes)) return false;
  const auto ceil = backend_.ceilings();
  const auto P = ceil.compute_for(r.dtype, opts_.ceiling);
  const auto W = ceil.bandwidth_for(opts_.ceiling);
  return P && W && cost.intensity() < P->value / W->value;
}

void BenchContext::prepare_point(const Point& p, PointOutcome& out) {
  op_.reset();
  current_ = p.name;
  prepare_error_.clear();
  // A point prepared again (Google Benchmark's random interleaving comes back to
  // it once per repetition) keeps the samples it has: one point, one pool.
  auto kept = std::move(out.samples);
  auto kept_fraction = std::move(out.paired_fraction);
  auto kept_read = std::move(out.paired_read);
  auto kept_throttle = std::move(out.throttle);  // the limiters over every group of the point
  auto kept_verdict = std::move(out.throttle_verdict);
  out = PointOutcome{};
  out.samples = std::move(kept);
  out.paired_fraction = std::move(kept_fraction);
  out.paired_read = std::move(kept_read);
  out.throttle = std::move(kept_throttle);
  out.throttle_verdict = std::move(kept_verdict);
  // Under mpirun the ranks agree on every point: one that any rank cannot run is
  // skipped by all, one that fails on any rank fails on all (the first rank's reason),
  // so their collective calls stay in step.
  Processes& procs = processes();
  const bool lockstep = procs.size() > 1;
  try {
    if (!p.invalid.empty()) throw Unsupported(p.invalid);
    std::string why = backend_.cannot_run(p.request).value_or("");
    if (lockstep) why = procs.first_of(why);
    if (!why.empty()) throw Unsupported(why);
    op_ = backend_.prepare(p.request);
    out.impl_detail = op_->notes();  // before verify: a point that fails it still names its engine
    op_->verify();  // runs once; a wrong result is an error, never a number
    op_->run();     // warm-up
  } catch (const Unsupported& e) {
    op_.reset();
    out.status = "skipped";
    out.message = e.what();
  } catch (const VerificationError& e) {
    op_.reset();
    out.status = "error";
    out.message = std::string("verification failed: ") + e.what();
  } catch (const std::exception& e) {
    op_.reset();
    out.status = "error";
    out.message = e.what();
  }
  if (lockstep && procs.first_failure(!op_, out.status, out.message)) op_.reset();
  if (!op_) {
    prepare_error_ = out.status + ": " + out.message;
    out.samples.clear();
  }
}

bool BenchContext::take_sample(const Point& p, bool pair, PointOutcome& out, std::vector<double>& call_samples) {
  TimingOptions topts;
  topts.cold_cache = opts_.cold_cache;
  topts.cold_timing = opts_.cold_timing;
  topts.range_name = p.name;
  // The paired read goes outside the timed region (manual time; it also leaves the caches cold).
  const std::optional<double> read = pair ? backend_.paired_read() : std::nullopt;
  // Ranks started by mpirun sample in lockstep (every point spans them): they
  // start each sample together, each sample is the slowest rank's time (the step
  // waits for it), and a sample one rank rejects is rejected by all.
  Processes& procs = processes();
  const bool lockstep = procs.size() > 1;
  if (lockstep) procs.any(false);  // a barrier
  Sample s;
  std::string failed;
  try {
    s = backend_.time(*op_, topts);
  } catch (const std::exception& e) {
    if (!lockstep) throw;
    failed = e.what();
  }
  if (lockstep) {
    failed = procs.first_of(failed);  // a sample that failed on one rank fails on all
    if (!failed.empty()) throw std::runtime_error(failed);
    s.seconds = procs.max(s.seconds);
  }
  bool low_clock = false;
  if (s.sm_mhz) {
    run_max_mhz_ = std::max(run_max_mhz_, *s.sm_mhz);
    low_clock = *s.sm_mhz < opts_.clock_ratio * run_max_mhz_;
  }
  if (lockstep) low_clock = procs.any(low_clock);
  if (low_clock && out.rejected_low_clock < kMaxRejectedPerPoint) {
    const double mhz = s.sm_mhz.value_or(0);
    out.rejected_min_mhz = out.rejected_low_clock ? std::min(out.rejected_min_mhz, mhz) : mhz;
    ++out.rejected_low_clock;
    return false;
  }
  if (read && *read > 0 && s.seconds > 0) {
    out.paired_read.push_back(*read);
    out.paired_fraction.push_back(static_cast<double>(p.cost.bytes.total()) / s.seconds / *read);
  }
  out.samples.push_back(s.seconds);
  call_samples.push_back(s.seconds);
  out.runs_per_sample = s.runs;
  out.timing_method = s.method;
  out.rotating_bytes = s.rotating_bytes;
  out.why_single = s.why_single;
  return true;
}

bool BenchContext::time_samples(benchmark::State& st, const Point& p, PointOutcome& out) {
  // Every timed sample of the point is kept in one pool, across Google
  // Benchmark's calls (its iteration-count estimation, each repetition): all
  // time the same prepared, verified and warmed-up operation.
  using Clock = std::chrono::steady_clock;
  const bool pair = pairs_reads(p);
  const auto& rule = opts_.stop;
  const std::size_t min_n = std::max(kMinSamplesPerPoint, rule.min_samples);
  try {
    backend_.begin_sample_group();
    for (auto _ : st) {
      std::vector<double> mine;
      if (!rule.by_noise) {
        // Google Benchmark's loop: one sample per iteration, per run() call so
        // its time column is one operation's time even for a CUDA graph.
        while (!take_sample(p, pair, out, mine)) {
        }
        st.SetIterationTime(mine.back());
        continue;
      }
      // By noise (registered with one iteration): this call samples until the
      // spread is small enough or its time is up; its time is the median.
      const auto t0 = Clock::now();
      for (;;) {
        take_sample(p, pair, out, mine);
        if (mine.size() < min_n) continue;
        out.noise = relative_noise(mine);
        if (out.noise <= rule.max_noise) {
          out.stop_reason = "converged";
          if (!out.converged.has_value()) out.converged = true;  // one call that did not stays false
          break;
        }
        bool time_up = std::chrono::duration<double>(Clock::now() - t0).count() >= rule.max_time_s;
        if (processes().size() > 1) time_up = processes().any(time_up);  // every rank stops at the same sample
        if (time_up) {
          out.stop_reason = "max_time";
          out.converged = false;
          break;
        }
      }
      st.SetIterationTime(stats_of(mine).median);
    }
    if (!rule.by_noise) {
      std::vector<double> extra;
      while (out.samples.size() < min_n) take_sample(p, pair, out, extra);
      out.noise = relative_noise(out.samples);
      out.stop_reason = "google_benchmark_min_time";
    }
    if (auto w = backend_.end_sample_group()) {
      if (out.throttle)
        out.throttle->merge(*w);
      else
        out.throttle = *w;
      out.throttle_verdict = judge_throttle(*out.throttle, run_max_mhz_);
    }
    out.clocks = backend_.clocks();
    measure_energy(out);
  } catch (const std::exception& e) {
    out.status = "error";
    out.message = e.what();
    op_.reset();
    prepare_error_ = "error: " + out.message;
    st.SkipWithError(prepare_error_.c_str());
    return false;
  }
  out.status = "ok";
  return true;
}

void BenchContext::measure_energy(PointOutcome& out) {
  using Clock = std::chrono::steady_clock;
  if (opts_.energy_window_s <= 0 || out.samples.empty()) return;
  backend_.synchronize();
  const auto e0 = backend_.energy();
  const bool none = processes().size() > 1 ? processes().any(!e0.ok) : !e0.ok;  // the ranks' windows go together
  if (none) return;  // the run context says once why there is no energy
  // Back-to-back runs (no flush: a flush would cost energy of its own),
  // synchronising about every 10 ms, until the window is full.
  const double per_run = std::max(1e-7, stats_of(out.samples).median);
  const auto batch = static_cast<std::uint64_t>(std::clamp(0.01 / per_run, 1.0, 1e5));
  std::uint64_t runs = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  do {
    for (std::uint64_t i = 0; i < batch; ++i) op_->run();
    backend_.synchronize();
    runs += batch;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (processes().size() > 1 ? processes().any(elapsed < opts_.energy_window_s) : elapsed < opts_.energy_window_s);
  const auto e1 = backend_.energy();
  if (!e1.ok) {
    out.energy_error = e1.error;
    return;
  }
  out.energy = PointOutcome::Energy{e1.joules - e0.joules, elapsed, runs};
}

void BenchContext::set_counters(benchmark::State& st, const Point& p, const PointOutcome& out) const {
  // From the median sample, by the harness's formulas.
  const auto& cost = p.cost;
  const auto stats = stats_of(out.samples);
  const double flops = static_cast<double>(cost.flops), bytes = static_cast<double>(cost.bytes.total());
  const auto ceil = backend_.ceilings();
  const auto P = ceil.compute_for(p.request.dtype, opts_.ceiling);
  const auto W = ceil.bandwidth_for(opts_.ceiling);
  st.counters["FLOP"] = benchmark::Counter(flops, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
  st.counters["bytes"] = benchmark::Counter(bytes, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
  st.counters["TFLOP/s"] = stats.median > 0 ? tflops(flops, stats.median) : 0.0;
  st.counters["GB/s"] = stats.median > 0 ? gbps(bytes, stats.median) : 0.0;
  st.counters["FLOP/B"] = cost.intensity();
  if (P && W) {
    const auto place = phasebench::place(flops, bytes, stats.median, P->value, W->value);
    st.counters["roofline"] = place.fraction;
    st.SetLabel(std::string(to_string(place.bound)) + "-bound " + std::to_string(static_cast<int>(std::lround(place.fraction * 100))) +
                "% of " + std::string(to_string(W->source)) + " roofline" + (out.throttled() ? " THROTTLED" : ""));
  } else if (W) {
    st.counters["roofline"] = bytes / stats.median / W->value;
  }
}

void BenchContext::run(benchmark::State& st, const Point& p) {
  auto& out = outcomes_[p.name];
  // Prepare (allocate, fill, verify, warm up) once per point, outside timing.
  if (current_ != p.name) prepare_point(p, out);
  if (!op_) {
    st.SkipWithError(prepare_error_.c_str());
    return;
  }
  if (time_samples(st, p, out)) set_counters(st, p, out);
}

namespace {

nlohmann::json place_json(const RooflinePlace& r, const Ceiling& P, const Ceiling& W) {
  return {{"peak_flops_per_s", P.value},
          {"compute_ceiling_source", to_string(P.source)},
          {"bandwidth_bytes_per_s", W.value},
          {"bandwidth_ceiling_source", to_string(W.source)},
          {"ridge_flop_per_byte", r.ridge},
          {"attainable_flops_per_s", r.attainable_flops},
          {"attainable_tflops", r.attainable_flops / 1e12},
          {"fraction_of_roofline", finite_or_null(r.fraction)},
          {"bound", to_string(r.bound)}};
}

// Raw samples, compactly: 6 significant digits are far below any timer's noise.
nlohmann::json compact_samples(const std::vector<double>& v) {
  auto a = nlohmann::json::array();
  for (double x : v) a.push_back(std::stod(fmt::format("{:.6g}", x)));
  return a;
}

// Tokens one run of a point processes: sequences x prompt tokens in prefill,
// sequences (x new tokens per sequence, where the point has them) in decode;
// 0 for points that are not about tokens (free shapes).
std::uint64_t tokens_of(const Point& p) {
  if (!p.args.count("batch")) return 0;
  std::uint64_t t = p.args.at("batch");
  if (p.phase == "prefill" && p.args.count("prompt")) t *= p.args.at("prompt");
  if (p.args.count("new_tokens")) t *= p.args.at("new_tokens");
  return t;
}

nlohmann::json energy_json(const Point& p, const PointOutcome::Energy& e, double bytes) {
  const double per_run = e.runs ? e.joules / static_cast<double>(e.runs) : 0;
  nlohmann::json j = {{"joules_per_run", per_run},
                      {"watts", e.seconds > 0 ? e.joules / e.seconds : 0.0},
                      {"window_s", e.seconds},
                      {"runs", e.runs},
                      {"joules_per_byte", bytes > 0 ? nlohmann::json(per_run / bytes) : nlohmann::json(nullptr)},
                      {"method", "the energy counter read around back-to-back runs (no flush between them) after the "
                                 "samples; joules over runs"}};
  const auto tokens = tokens_of(p);
  j["tokens_per_run"] = tokens;
  j["joules_per_token"] = tokens ? nlohmann::json(per_run / static_cast<double>(tokens)) : nlohmann::json(nullptr);
  return j;
}

}  // namespace

nlohmann::json point_identity_json(const Point& p) {
  nlohmann::json j;
  j["phase"] = p.phase;
  j["op"] = p.op;
  j["op_kind"] = p.request.kind;
  j["model"] = p.model;
  j["target"] = p.target;
  j["dtype"] = to_string(p.request.dtype);
  j["impl"] = to_string(p.request.impl);
  j["args"] = p.args;
  for (const auto& [k, v] : p.text_args) j["args"][k] = v;
  const auto& decl = OpRegistry::get().op(p.request.kind);
  j["shape"] = decl.shape_json ? decl.shape_json(p.request) : p.request.shape.to_json();
  if (p.invalid.empty()) {  // no cost for a point whose sizes overflow
    j["flops"] = p.cost.flops;
    j["bytes"] = bytes_json(p.cost.bytes);
    j["intensity"] = finite_or_null(p.cost.intensity());
  }
  return j;
}

nlohmann::json BenchContext::point_json(const std::string& name) const {
  const Point* p = point(name);
  if (!p) return nullptr;
  const PointOutcome* o = outcome(name);
  const auto& cost = p->cost;
  nlohmann::json j = point_identity_json(*p);
  if (p->invalid.empty()) j["beyond_caches"] = beyond_caches(cost.bytes.total(), backend_.device().cache_bytes);
  j["cache"] = opts_.cold_cache ? "cold" : "hot";
  j["status"] = o ? o->status : "not run";
  if (o && !o->message.empty()) j["message"] = o->message;
  if (o && !o->impl_detail.empty()) j["impl_detail"] = o->impl_detail;
  if (!o || o->status != "ok" || o->samples.empty()) return j;
  const auto s = stats_of(o->samples);
  j["time"] = {{"median_s", s.median}, {"mean_s", s.mean}, {"min_s", s.min}, {"max_s", s.max},
               {"stddev_s", s.stddev}, {"cv", s.cv}, {"samples", s.count}, {"runs_per_sample", o->runs_per_sample},
               {"noise", o->noise}, {"converged", o->converged ? nlohmann::json(*o->converged) : nlohmann::json(nullptr)},
               {"stop_reason", o->stop_reason}, {"samples_s", compact_samples(o->samples)},
               {"method", o->timing_method}};
  if (o->timing_method == "rotating_graph") {
    j["time"]["rotating_copies"] = o->runs_per_sample;
    j["time"]["rotating_bytes"] = o->rotating_bytes;
  }
  if (!o->why_single.empty()) j["time"]["why_single"] = o->why_single;
  const double flops = static_cast<double>(cost.flops), bytes = static_cast<double>(cost.bytes.total());
  j["tflops"] = finite_or_null(tflops(flops, s.median));
  j["gbps"] = finite_or_null(gbps(bytes, s.median));
  j["throttled"] = o->throttled();
  if (o->throttle) j["throttle"] = throttle_json(*o->throttle, o->throttle_verdict);
  j["clocks"] = o->clocks;
  if (o->rejected_low_clock > 0 || run_max_mhz_ > 0)
    j["clock_check"] = {{"ratio", opts_.clock_ratio},
                        {"run_max_sm_mhz", run_max_mhz_},
                        {"rejected_samples", o->rejected_low_clock},
                        {"rejected_min_sm_mhz", o->rejected_low_clock ? nlohmann::json(o->rejected_min_mhz) : nlohmann::json(nullptr)}};
  if (o->energy) j["energy"] = energy_json(*p, *o->energy, bytes);
  if (!o->energy_error.empty()) j["energy"] = {{"error", o->energy_error}};
  if (const auto* report = OpRegistry::get().point_report(p->request.kind)) {
    // What the operation adds (phasebench/report.hpp), reading the run's other points.
    RunView run;
    run.spec = backend_.device().spec ? &*backend_.device().spec : nullptr;
    run.each_point = [&](const std::function<void(const Point&)>& fn) {
      for (const auto& kv : points_) fn(kv.second);
    };
    run.median_s = [&](const Point& q) -> std::optional<double> {
      const PointOutcome* oq = outcome(q.name);
      if (!oq || oq->status != "ok" || oq->samples.empty()) return std::nullopt;
      return stats_of(oq->samples).median;
    };
    auto extra = report->json(*p, s.median, run);  // a named object: items() only refers to it
    for (auto& [k, v] : extra.items()) j[k] = std::move(v);
  }
  const auto ceil = backend_.ceilings();
  nlohmann::json all = nlohmann::json::object();
  for (auto src : {CeilingSource::measured, CeilingSource::datasheet, CeilingSource::theoretical}) {
    // Only exact sources here: each entry says what it was computed against.
    std::optional<Ceiling> P, W;
    if (auto it = ceil.compute().find(p->request.dtype); it != ceil.compute().end())
      for (const auto& c : it->second)
        if (c.source == src && !P) P = c;
    for (const auto& c : ceil.bandwidth())
      if (c.source == src && !W) W = c;
    if (P && W) all[std::string(to_string(src))] = place_json(place(flops, bytes, s.median, P->value, W->value), *P, *W);
  }
  j["roofline_by_source"] = all;
  if (!o->paired_fraction.empty()) {
    const auto f = stats_of(o->paired_fraction);
    const bool suspect = f.median > kPairedSuspectAbove;
    j["paired_read"] = {
        {"suspect", suspect},
        {"fraction_median", f.median},
        {"fraction_min", f.min},
        {"fraction_max", f.max},
        {"pairs", f.count},
        {"read_bytes_per_s_median", stats_of(o->paired_read).median},
        {"method", "a streaming read beyond the caches (CPU: 4x the last-level cache, at least 128 MiB, in turn "
                   "from a ring of four) timed right before each sample, outside it; per sample its bytes/s over "
                   "that read's bytes/s; the median over the samples"},
        {"read", backend_.paired_read_method()}};
    if (suspect)
      j["paired_read"]["why_suspect"] =
          "the point moved more bytes per second than the streaming read timed right before it: not a result "
          "(a read that met cold pages, or data the caches still held); the summary leaves it out of the paired column";
  }
  const auto P = ceil.compute_for(p->request.dtype, opts_.ceiling);
  const auto W = ceil.bandwidth_for(opts_.ceiling);
  if (P && W) {
    const auto r = place(flops, bytes, s.median, P->value, W->value);
    j["roofline"] = place_json(r, *P, *W);
    j["fraction_of_roofline"] = finite_or_null(r.fraction);
    j["bound"] = to_string(r.bound);
    j["attainable_tflops"] = r.attainable_flops / 1e12;
    if (r.fraction > 1.0)
      j["above_roofline"] = {{"fraction", r.fraction},
                             {"likely_cause", above_roofline_cause(r.bound, *P, *W, p->cost.bytes.total(), p->request.dtype)}};
  }
  return j;
}

std::string BenchContext::above_roofline_cause(Bound bound, const Ceiling& P, const Ceiling& W, std::uint64_t bytes,
                                               DType dtype) const {
  if (!opts_.cold_cache)
    return "data cached: hot-cache samples read what the previous run left in the caches (--cache cold measures memory)";
  if (bound == Bound::memory && !beyond_caches(bytes, backend_.device().cache_bytes))
    return "data cached: the point moves less than " + std::to_string(kBeyondCachesFactor) +
           "x the last-level cache, so the caches serve part of it";
  if (bound == Bound::memory)
    return "ceiling low: the " + std::string(to_string(W.source)) + " bandwidth (" + W.method +
           ") is below what the memory gave during this point; on a shared machine it moves (see bandwidth_check, "
           "and paired_read where present)";
  return "ceiling low: the " + std::string(to_string(P.source)) + " " + std::string(to_string(dtype)) + " peak (" +
         P.method + ") is below what this point achieved (a measured GEMM short of the peak, or clocks above nominal)";
}

void register_points(BenchContext& ctx, const std::vector<Point>& points) {
  for (const auto& p : points) {
    ctx.add_point(p);
    const Point* stored = ctx.point(p.name);
    auto* b = benchmark::RegisterBenchmark(p.name.c_str(), [&ctx, stored](benchmark::State& st) { ctx.run(st, *stored); })
                  ->UseManualTime()
                  ->Unit(benchmark::kMicrosecond);
    // By noise, one Google Benchmark iteration holds all of a call's samples.
    if (ctx.options().stop.by_noise) b->Iterations(1);
  }
}

}  // namespace phasebench
