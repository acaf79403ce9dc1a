#pragma once
// `phasebench run --verify-only`: every selected point is prepared and checked
// against its reference, nothing is timed and no results file is written. A quick
// correctness pass before a long sweep on a GPU, and the only thing the build over
// the functional CUDA emulation (phasebench-emu) may run.
#include <iosfwd>
#include <string>
#include <vector>

#include "backend.hpp"
#include "sweep.hpp"

namespace phasebench {

// The points a Google Benchmark filter selects (a regex searched in the name; a
// leading '-' selects the points it does not match, as Google Benchmark does).
std::vector<const Point*> select_points(const std::vector<Point>& points, const std::string& filter);

struct VerifyCounts {
  std::size_t ok = 0, wrong = 0, skipped = 0, errors = 0;
};

// Prepares and verifies each point in turn, printing one line per point as it
// finishes, then a total. A point the backend cannot run is skipped with the reason.
VerifyCounts verify_points(Backend& backend, const std::vector<const Point*>& points, std::ostream& out);

}  // namespace phasebench
