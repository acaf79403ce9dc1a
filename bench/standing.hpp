#pragma once
// The rule that picks the entry standing for each point of a results file, the
// one every reader of results applies (the summary, the operations' records and
// sections, and python/phasebench_tools/results.py alike).
#include <nlohmann/json.hpp>

#include <vector>

#include "phasebench/report.hpp"

namespace phasebench {

// The benchmark entry that stands for each point of `results`, in the order the
// points are first seen: a point is its run_name (else name; an entry with neither
// as a non-empty string is a point of its own); the last iteration entry (any
// run_type but "aggregate") carrying a "phasebench" object stands for it (every
// repetition carries the point's pooled statistics); aggregates count only for a
// point none of whose iterations has one (--benchmark_report_aggregates_only), and
// then its median. python/phasebench_tools/results.py reads files by the same
// rule; tests/conformance holds the cases both must pass.
Standing standing_points(const nlohmann::json& results);

// context.phasebench of `results` (an empty object when it has none).
nlohmann::json run_context(const nlohmann::json& results);

}  // namespace phasebench
