#include "fixture.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "phasebench/error.hpp"
#include "phasebench/json_fields.hpp"

namespace phasebench {

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

const Point* BenchContext::point(const std::string& name) const {
  auto it = points_.find(name);
  return it == points_.end() ? nullptr : &it->second;
}

void BenchContext::run(benchmark::State& st, const Point& p) {
  auto& out = outcomes_[p.name];
  // Prepare (allocate, fill, verify, warm up) once per point, outside timing.
  if (current_ != p.name) {
    op_.reset();
    current_ = p.name;
    prepare_error_.clear();
    out = PointOutcome{};
    try {
      if (auto why = backend_.cannot_run(p.request)) throw Unsupported(*why);
      op_ = backend_.prepare(p.request);
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
    if (!op_) prepare_error_ = out.status + ": " + out.message;
  }
  if (!op_) {
    st.SkipWithError(prepare_error_.c_str());
    return;
  }
  out.samples.clear();
  TimingOptions topts;
  topts.cold_cache = opts_.cold_cache;
  topts.range_name = p.name;
  try {
    backend_.throttled_since_last_check();  // reset the flag for this call
    for (auto _ : st) {
      const Sample s = backend_.time(*op_, topts);
      // Per run() call, so Google Benchmark's time column is one operation's time
      // even when the backend timed several calls together.
      st.SetIterationTime(s.seconds);
      out.samples.push_back(s.seconds);
      out.runs_per_sample = s.runs;
    }
    out.throttled = backend_.throttled_since_last_check();
    out.clocks = backend_.clocks();
  } catch (const std::exception& e) {
    out.status = "error";
    out.message = e.what();
    op_.reset();
    prepare_error_ = "error: " + out.message;
    st.SkipWithError(prepare_error_.c_str());
    return;
  }
  out.status = "ok";
  // Counters from the median sample, computed by the harness's formulas.
  const auto cost = p.request.cost();
  const auto stats = stats_of(out.samples);
  const double flops = static_cast<double>(cost.flops), bytes = static_cast<double>(cost.bytes.total());
  const auto ceil = backend_.ceilings();
  const auto P = ceil.compute_for(p.request.dtype, opts_.ceiling);
  const auto W = ceil.bandwidth_for(opts_.ceiling);
  st.counters["FLOP"] = benchmark::Counter(flops, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
  st.counters["bytes"] = benchmark::Counter(bytes, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
  st.counters["TFLOP/s"] = stats.median > 0 ? flops / stats.median / 1e12 : 0.0;
  st.counters["GB/s"] = stats.median > 0 ? bytes / stats.median / 1e9 : 0.0;
  st.counters["FLOP/B"] = cost.intensity();
  if (P && W) {
    const auto place = phasebench::place(flops, bytes, stats.median, P->value, W->value);
    st.counters["roofline"] = place.fraction;
    st.SetLabel(std::string(to_string(place.bound)) + "-bound " + std::to_string(static_cast<int>(std::lround(place.fraction * 100))) +
                "% of " + std::string(to_string(W->source)) + " roofline" + (out.throttled ? " THROTTLED" : ""));
  } else if (W) {
    st.counters["roofline"] = bytes / stats.median / W->value;
  }
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

}  // namespace

nlohmann::json BenchContext::point_json(const std::string& name) const {
  const Point* p = point(name);
  if (!p) return nullptr;
  const PointOutcome* o = outcome(name);
  const auto cost = p->request.cost();
  nlohmann::json j;
  j["phase"] = p->phase;
  j["op"] = p->op;
  j["op_kind"] = to_string(p->request.kind);
  j["model"] = p->model;
  j["target"] = p->target;
  j["dtype"] = to_string(p->request.dtype);
  j["impl"] = to_string(p->request.impl);
  j["args"] = p->args;
  LayerOp shape_holder;
  shape_holder.kind = p->request.kind;
  shape_holder.linear = p->request.linear;
  shape_holder.attention = p->request.attention;
  shape_holder.prefill = p->request.prefill;
  shape_holder.append = p->request.append;
  j["shape"] = shape_json(shape_holder);
  j["flops"] = cost.flops;
  j["bytes"] = bytes_json(cost.bytes);
  j["intensity"] = finite_or_null(cost.intensity());
  j["cache"] = opts_.cold_cache ? "cold" : "hot";
  j["status"] = o ? o->status : "not run";
  if (o && !o->message.empty()) j["message"] = o->message;
  if (!o || o->status != "ok" || o->samples.empty()) return j;
  const auto s = stats_of(o->samples);
  j["time"] = {{"median_s", s.median}, {"mean_s", s.mean}, {"min_s", s.min}, {"max_s", s.max},
               {"stddev_s", s.stddev}, {"cv", s.cv}, {"samples", s.count}, {"runs_per_sample", o->runs_per_sample}};
  const double flops = static_cast<double>(cost.flops), bytes = static_cast<double>(cost.bytes.total());
  j["tflops"] = finite_or_null(flops / s.median / 1e12);
  j["gbps"] = finite_or_null(bytes / s.median / 1e9);
  j["throttled"] = o->throttled;
  j["clocks"] = o->clocks;
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
  const auto P = ceil.compute_for(p->request.dtype, opts_.ceiling);
  const auto W = ceil.bandwidth_for(opts_.ceiling);
  if (P && W) {
    const auto r = place(flops, bytes, s.median, P->value, W->value);
    j["roofline"] = place_json(r, *P, *W);
    j["fraction_of_roofline"] = finite_or_null(r.fraction);
    j["bound"] = to_string(r.bound);
    j["attainable_tflops"] = r.attainable_flops / 1e12;
  }
  return j;
}

void register_points(BenchContext& ctx, const std::vector<Point>& points) {
  for (const auto& p : points) {
    ctx.add_point(p);
    const Point* stored = ctx.point(p.name);
    benchmark::RegisterBenchmark(p.name.c_str(), [&ctx, stored](benchmark::State& st) { ctx.run(st, *stored); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace phasebench
