#pragma once
// `phasebench overhead`: does the harness distort what it times? The same
// operation is timed in rounds, each with a bare loop of back-to-back calls and
// the same number of harness samples (backend.time(), hot cache), the order
// alternating from round to round. Each round's harness mean over its bare
// per-call mean compares the two paths at the same moment, so the machine's
// drift between rounds cancels (timing all bare calls first and all harness
// samples after, as the first version did, read drift of +-5% as distortion).
#include <cstddef>
#include <vector>

namespace phasebench {

struct OverheadRound {
  double bare_per_call = 0;             // seconds: a bare batch's time / its calls
  std::vector<double> harness_samples;  // seconds per call, as the harness timed them
};

struct OverheadComparison {
  double paired_difference = 0;  // median over rounds of harness mean / bare per-call - 1
  double spread = 0;             // half the range of the middle half of the rounds' differences
  double bare_median = 0;        // of the rounds' bare per-call times
  double harness_median = 0;     // of all harness samples (what phasebench reports)
  double harness_cv = 0;
  std::size_t rounds = 0, samples = 0;
};

// Throws std::invalid_argument on no rounds, empty rounds or non-positive times.
OverheadComparison compare_overhead(const std::vector<OverheadRound>& rounds);

}  // namespace phasebench
