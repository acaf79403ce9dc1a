#pragma once
// Runs a list of points through Google Benchmark with no output, as
// `phasebench run` would, so tests can inspect BenchContext's outcomes.
#include <benchmark/benchmark.h>

#include <vector>

#include "fixture.hpp"

namespace phasebench::test {

inline void run_points_quietly(BenchContext& ctx, const std::vector<Point>& pts) {
  benchmark::ClearRegisteredBenchmarks();
  register_points(ctx, pts);
  static const char* argv0 = "test";
  int argc = 1;
  char* argv[] = {const_cast<char*>(argv0), nullptr};
  benchmark::Initialize(&argc, argv);
  struct Null : benchmark::BenchmarkReporter {
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>&) override {}
  } null;
  benchmark::RunSpecifiedBenchmarks(&null);
}

}  // namespace phasebench::test
