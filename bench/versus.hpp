#pragma once
// The summary's "ours vs the libraries": each of our points paired with the same point
// (same key but impl) of every other implementation in the file, per operation, shape
// class and library; and the library points that did not run, grouped by their reason.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "phasebench/report.hpp"

namespace phasebench {

// The time the roofline allows a point below which it is "small" and from which it
// is "large" (between: "medium"). docs/design.md, "Reporting", says why these.
inline constexpr double kShapeSmallBelowS = 10e-6;
inline constexpr double kShapeLargeFromS = 100e-6;

// A point's shape class: its bound (memory or compute, from its roofline block) and
// its size (small, medium, large) from the time its roofline allows, max(FLOPs / P,
// minimum bytes / W) against the point's own ceilings; nullopt for a point without a
// roofline placement (no ceilings, or not run).
std::optional<std::string> shape_class(const nlohmann::json& pb);

// The section's text, "" when the file has no point of ours beside another
// implementation's (ok or not).
std::string versus_libraries(const Standing& standing);

}  // namespace phasebench
