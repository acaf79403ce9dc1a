// JSON of the harness's types (json_fields.hpp): bytes, costs and ceilings as the
// results file and `estimate --json` write them.
#include "phasebench/json_fields.hpp"

#include <cmath>

namespace phasebench {

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json bytes_json(const Bytes& b) {
  return {{"weights", b.weights},         {"kv_cache", b.kv_cache}, {"activations", b.activations},
          {"block_table", b.block_table}, {"writes", b.writes},     {"total", b.total()}};
}

nlohmann::json cost_json(const OpCost& c) {
  return {{"flops", c.flops}, {"bytes", bytes_json(c.bytes)}, {"intensity", finite_or_null(c.intensity())}};
}

nlohmann::json ceilings_json(const Ceilings& c) {
  nlohmann::json compute = nlohmann::json::object();
  for (const auto& [t, v] : c.compute()) {
    auto& arr = compute[std::string(to_string(t))];
    arr = nlohmann::json::array();
    for (const auto& x : v)
      arr.push_back({{"flops_per_s", finite_or_null(x.value)}, {"source", to_string(x.source)}, {"method", x.method}});
  }
  nlohmann::json bw = nlohmann::json::array();
  for (const auto& x : c.bandwidth())
    bw.push_back({{"bytes_per_s", finite_or_null(x.value)}, {"source", to_string(x.source)}, {"method", x.method}});
  nlohmann::json cache = nlohmann::json::array();
  for (const auto& x : c.cache_bandwidth())
    cache.push_back({{"level", x.level},
                     {"bytes_per_s", finite_or_null(x.ceiling.value)},
                     {"source", to_string(x.ceiling.source)},
                     {"method", x.ceiling.method}});
  return {{"compute", compute}, {"bandwidth", bw}, {"cache_bandwidth", cache}};
}

}  // namespace phasebench
