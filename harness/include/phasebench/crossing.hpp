#pragma once
// The batch where a decode layer crosses from memory-bound to compute-bound, from
// a results file's points (measured) and from the ceilings (predicted): the rule
// the decode linear and MoE crossings share (docs/design.md, "Crossings").
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace phasebench {

// A layer's points over its batches: the fastest point of each batch and the
// ceilings its points were placed against (ceilings are per run).
struct CrossingPoints {
  std::map<std::uint64_t, std::pair<double, double>> best;  // batch -> (FLOP/s, bytes/s) of its fastest point
  std::map<std::uint64_t, double> fastest;                  // batch -> its median time
  std::map<std::uint64_t, std::string> bound;               // batch -> its points' bound label ("memory", "compute")
  nlohmann::json by_source = nlohmann::json::object();      // roofline_by_source of a point
  nlohmann::json in_use;                                     // its "roofline" (the ceilings in use; none without)
  // Adds point `p` (a "phasebench" object with time, flops and bytes) at `batch`.
  void add(const nlohmann::json& p, std::uint64_t batch);
};

nlohmann::json batch_or_null(const std::optional<std::uint64_t>& b);

// The "phasebench" object of a standing entry when it is a crossing's input: an
// "ok" decode point of operation `kind` with its time, shape and bytes; else null.
const nlohmann::json* crossing_input(const nlohmann::json& entry, std::string_view kind);

// A crossing record's prediction for the ceilings it was made with (ceiling_used),
// an empty object without ceilings; and a batch as the summary prints it.
nlohmann::json prediction_in_use(const nlohmann::json& record);
std::string batch_text(const nlohmann::json& batch);  // the number, or "never"

// The batches measured and the measured crossing: where the intensity reaches
// P_eff/W_eff, the best FLOP/s and the best bytes/s achieved (`batch_at` turns a
// ridge into a batch); "> B" while the largest batch B still streams at 70% of
// W_eff, "one batch only" with a single batch. It never contradicts the points'
// own bound labels (which use the ridge of the ceilings in use): the crossing
// lies after the last batch labelled memory-bound and no later than the first
// labelled compute-bound, so a layer ridge outside that interval is brought to
// its nearer end; "own_ridge" then keeps where P_eff/W_eff alone would put it,
// and "labels" the interval.
std::pair<nlohmann::json, nlohmann::json> measured_crossing(
    const CrossingPoints& l, const std::function<std::optional<std::uint64_t>(double)>& batch_at);

// The summary's note under a crossings table: each layer whose own ridge the
// labels moved (measured.own_ridge), where that ridge alone would put it; "" when none.
std::string own_ridge_notes(const nlohmann::json& records);

// The predicted crossing per ceiling source of the points' roofline_by_source,
// and for the ceilings in use (which may mix sources); `extra(ridge)` adds
// members beside the batch `batch_at(ridge)`, the ridge and its sources.
nlohmann::json predicted_crossings(const CrossingPoints& l, const std::string& ceiling_used,
                                   const std::function<std::optional<std::uint64_t>(double)>& batch_at,
                                   const std::function<void(double ridge, nlohmann::json& out)>& extra = {});

}  // namespace phasebench
