#pragma once
// The decode linear layers' crossings from memory-bound to compute-bound, as a
// run records them (context.phasebench.decode_linear_crossings, results schema
// 2), and the rule that picks the entry standing for each point of a results file.
#include <nlohmann/json.hpp>

#include <vector>

namespace phasebench {

// The benchmark entry that stands for each point of `results`, in the order the
// points are first seen: a point is its run_name (else name; an entry with neither
// as a non-empty string is a point of its own); the last iteration entry (any
// run_type but "aggregate") carrying a "phasebench" object stands for it (every
// repetition carries the point's pooled statistics); aggregates count only for a
// point none of whose iterations has one (--benchmark_report_aggregates_only), and
// then its median. python/phasebench_tools/results.py reads files by the same
// rule; tests/conformance holds the cases both must pass.
std::vector<const nlohmann::json*> standing_points(const nlohmann::json& results);

// One record per decode linear layer (model, target, dtype) with "ok" decode GEMV
// points in `results`:
//   layer, model, target, dtype, N, K, batches (the batches measured);
//   measured: the batch where the intensity reaches P_eff/W_eff, the best FLOP/s
//     and the best bytes/s the layer achieved over its batches (the fastest point
//     of each batch, any impl) - null with text "> B" while the largest batch B
//     still moves 70% of W_eff, "one batch only", or "never" (beyond 2^24);
//   predicted: per ceiling source of the points' roofline_by_source, and for the
//     ceilings in use (ceiling_used, the run's --ceiling), the batch where the
//     intensity reaches that ridge P/W, with the ridge (none without ceilings);
//   ceiling_used.
// Intensities count the output in linear_output_type (fp8 writes bf16).
nlohmann::json decode_linear_crossings(const nlohmann::json& results);

// The same for the MoE experts (op_kind moe_experts), one record per (model,
// routing, dtype) with "ok" decode points: layer ("<model>.experts"), model,
// routing, dtype, k, E, h, I, batches, measured (as above, the crossing batch
// from moe_batch_at_intensity at P_eff/W_eff), predicted (per ceiling source:
// the batch where the expected experts touched put the intensity at the ridge,
// with `dense_batch`: where one expert's gate_up, as a dense layer, reaches the
// same ridge), ceiling_used.
nlohmann::json decode_moe_crossings(const nlohmann::json& results);

}  // namespace phasebench
