// `phasebench overhead`: the same >= 1 ms operation timed by the harness and by a
// bare loop, so the harness's own distortion is a measured number.
#include "overhead.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "fixture.hpp"  // stats_of

namespace phasebench {

OverheadComparison compare_overhead(const std::vector<OverheadRound>& rounds) {
  if (rounds.empty()) throw std::invalid_argument("overhead: no rounds");
  std::vector<double> diffs, bare, all;
  for (const auto& r : rounds) {
    if (r.harness_samples.empty() || r.bare_per_call <= 0) throw std::invalid_argument("overhead: an empty round");
    for (double s : r.harness_samples)
      if (s <= 0) throw std::invalid_argument("overhead: a non-positive sample");
    const double mean = std::accumulate(r.harness_samples.begin(), r.harness_samples.end(), 0.0) /
                        static_cast<double>(r.harness_samples.size());
    diffs.push_back(mean / r.bare_per_call - 1.0);
    bare.push_back(r.bare_per_call);
    all.insert(all.end(), r.harness_samples.begin(), r.harness_samples.end());
  }
  OverheadComparison c;
  c.rounds = rounds.size();
  c.samples = all.size();
  c.paired_difference = stats_of(diffs).median;
  std::sort(diffs.begin(), diffs.end());
  const std::size_t n = diffs.size();
  c.spread = 0.5 * (diffs[(3 * n) / 4] - diffs[n / 4]);
  c.bare_median = stats_of(bare).median;
  const auto h = stats_of(all);
  c.harness_median = h.median;
  c.harness_cv = h.cv;
  return c;
}

}  // namespace phasebench
