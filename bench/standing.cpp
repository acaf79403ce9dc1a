// The entry that stands for each point of a results file (standing.hpp).
#include "standing.hpp"

#include <map>
#include <string>

namespace phasebench {

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
  for (const auto& b : benchmarks) {
    if (!b.is_object() || !b.contains("phasebench")) continue;
    const std::string run = b.value("run_name", b.value("name", ""));
    if (!by_run.count(run)) order.push_back(run);
    auto& s = by_run[run];
    if (b.value("run_type", "iteration") != "aggregate")
      s.iteration = &b;
    else if (b.value("aggregate_name", "") == "median")
      s.median = &b;
  }
  std::vector<const nlohmann::json*> out;
  for (const auto& run : order) {
    const auto& s = by_run.at(run);
    if (const auto* b = s.iteration ? s.iteration : s.median) out.push_back(b);
  }
  return out;
}

nlohmann::json run_context(const nlohmann::json& results) {
  if (!results.is_object()) return nlohmann::json::object();
  return results.value("context", nlohmann::json::object()).value("phasebench", nlohmann::json::object());
}

}  // namespace phasebench
