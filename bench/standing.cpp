// The entry that stands for each point of a results file (standing.hpp).
#include "standing.hpp"

#include <map>
#include <string>

#include "phasebench/op.hpp"

namespace phasebench {

namespace {

// A point's identity: its run_name, else its name (non-empty strings), else the
// entry alone ("#" and its index, after a NUL no name holds).
std::string point_id(const nlohmann::json& b, std::size_t index) {
  for (const char* k : {"run_name", "name"})
    if (const auto it = b.find(k); it != b.end() && it->is_string() && !it->get_ref<const std::string&>().empty())
      return it->get<std::string>();
  return std::string(1, '\0') + "#" + std::to_string(index);
}

}  // namespace

Standing standing_points(const nlohmann::json& results) {
  struct Candidates {
    const nlohmann::json* iteration = nullptr;
    const nlohmann::json* median = nullptr;
  };
  std::map<std::string, Candidates> by_run;
  std::vector<std::string> order;
  // Pointers into `results` itself (value() would copy).
  static const nlohmann::json none = nlohmann::json::array();
  const auto& benchmarks = results.is_object() && results.contains("benchmarks") ? results.at("benchmarks") : none;
  for (std::size_t i = 0; i < benchmarks.size(); ++i) {
    const auto& b = benchmarks[i];
    if (!b.is_object()) continue;
    const std::string run = point_id(b, i);
    if (!by_run.count(run)) order.push_back(run);  // points in the order first seen
    auto& s = by_run[run];
    // An entry without a phasebench object is none of ours: it neither stands nor hides another.
    if (!b.contains("phasebench") || !b.at("phasebench").is_object()) continue;
    if (b.value("run_type", nlohmann::json()) != "aggregate")
      s.iteration = &b;
    else if (b.value("aggregate_name", nlohmann::json()) == "median")
      s.median = &b;
  }
  std::vector<const nlohmann::json*> out;
  for (const auto& run : order) {
    const auto& s = by_run.at(run);
    if (const auto* b = s.iteration ? s.iteration : s.median) out.push_back(b);
  }
  return out;
}

void upgrade_names(nlohmann::json& results) {
  if (!results.is_object() || !results.contains("benchmarks") || !results.at("benchmarks").is_array()) return;
  const auto& reg = OpRegistry::get();
  for (auto& b : results.at("benchmarks")) {
    if (!b.is_object() || !b.contains("phasebench") || !b.at("phasebench").is_object()) continue;
    auto& pb = b.at("phasebench");
    const auto kind = pb.find("op_kind");
    if (kind == pb.end() || !kind->is_string()) continue;
    const std::string current = reg.current_kind(kind->get<std::string>());
    pb["op_kind"] = current;
    pb["op"] = current;
  }
}

nlohmann::json run_context(const nlohmann::json& results) {
  if (!results.is_object()) return nlohmann::json::object();
  return results.value("context", nlohmann::json::object()).value("phasebench", nlohmann::json::object());
}

}  // namespace phasebench
