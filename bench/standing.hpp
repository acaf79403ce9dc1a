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

// Today's names in a results file written before an operation was renamed: each
// phasebench block's op_kind becomes the kind that is or was called so
// (OpRegistry::current_kind) and its op that kind (schema 4: a point's op is its
// kind; before, decode/gemv, decode/attention, prefill/attention, ...). Blocks
// without an op_kind keep their op. load_results applies it to every file it reads;
// python/phasebench_tools/results.py does the same.
void upgrade_names(nlohmann::json& results);

// context.phasebench of `results` (an empty object when it has none).
nlohmann::json run_context(const nlohmann::json& results);

}  // namespace phasebench
