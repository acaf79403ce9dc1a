#pragma once
// What an operation adds to a run's results and to the summary, declared beside
// the operation (harness/src/ops/<name>_report.cpp): extra JSON for each of its
// measured points, run-level records (context.phasebench.<key>, written when the
// sweep ends) and summary sections. bench/ asks the registry for these and names
// no operation itself (docs/design.md, "Reporting").
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace phasebench {

struct GpuSpec;
struct Point;

// What a point's extra JSON may read of the run it belongs to.
struct RunView {
  const GpuSpec* spec = nullptr;  // the matched datasheet entry, or none
  // Calls the function with every point of the run.
  std::function<void(const std::function<void(const Point&)>&)> each_point;
  // A point's median time if it ran and has samples.
  std::function<std::optional<double>(const Point&)> median_s;
};

// Extra members for the JSON of each measured point of operation `kind`, and how
// many of such a point one model step runs (a layer: the model's layers; the
// summary's J/token multiplies by it).
struct PointReport {
  std::string kind;
  // Returns an object whose members are added to the point's "phasebench" JSON.
  std::function<nlohmann::json(const Point&, double median_s, const RunView&)> json;
  std::function<double(const nlohmann::json& point)> per_step = {};
  // False where a link, not the device's roofline, bounds the op (the collectives): the
  // summary's fraction-of-roofline table counts its points but gives it no fraction (its
  // own section holds it against its link).
  bool roofline_bound = true;
};

// The standing entries of a results file (benchmark objects with their
// "phasebench" member; the rule is bench/crossings.hpp's standing_points).
using Standing = std::vector<const nlohmann::json*>;

// A run-level record: context.phasebench.<key>, made from the standing entries
// when the sweep ends; the summary computes it for files written before it.
struct RunRecord {
  std::string key;
  std::function<nlohmann::json(const Standing&, const nlohmann::json& run)> make;  // run: context.phasebench
};

// What a summary section reads.
struct SummaryInput {
  const Standing& standing;
  const nlohmann::json& run;  // context.phasebench
  // The record `key` as the file holds it, or computed now for a file without it.
  std::function<nlohmann::json(const std::string& key)> record;
};

// One section of the summary, printed after the fraction table in `order`; an
// empty string prints nothing.
struct SummarySection {
  std::string name;
  int order = 0;
  std::function<std::string(const SummaryInput&)> text;
};

// Helpers the sections share.
double median_of(std::vector<double> v);
// A number member of `j` (NaN when absent or not a number).
double number_or_nan(const nlohmann::json& j, const char* key);
// A table cell: `v` times `scale` formatted by `format` (fmt's syntax), or "-" where
// `v` is not a number (null, absent).
std::string number_or_dash(const nlohmann::json& v, const char* format, double scale = 1);

}  // namespace phasebench
