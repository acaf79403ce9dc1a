// The crossing rule shared by the decode linear and MoE crossings (crossing.hpp).
#include "phasebench/crossing.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace phasebench {

void CrossingPoints::add(const nlohmann::json& p, std::uint64_t batch) {
  const double t = p.at("time").value("median_s", 0.0);
  if (t <= 0) return;
  if (!fastest.count(batch) || t < fastest[batch]) {
    fastest[batch] = t;
    best[batch] = {p.value("flops", 0.0) / t, p.at("bytes").value("total", 0.0) / t};
  }
  by_source = p.value("roofline_by_source", nlohmann::json::object());
  if (p.contains("roofline")) in_use = p.at("roofline");
}

nlohmann::json batch_or_null(const std::optional<std::uint64_t>& b) { return b ? nlohmann::json(*b) : nlohmann::json(); }

const nlohmann::json* crossing_input(const nlohmann::json& entry, std::string_view kind) {
  const auto& p = entry.at("phasebench");
  if (p.value("phase", "") != "decode" || p.value("op_kind", "") != kind || p.value("status", "") != "ok") return nullptr;
  if (!p.contains("time") || !p.contains("shape") || !p.contains("bytes")) return nullptr;
  return &p;
}

nlohmann::json prediction_in_use(const nlohmann::json& record) {
  return record.at("predicted").value(record.value("ceiling_used", ""), nlohmann::json::object());
}

std::string batch_text(const nlohmann::json& batch) {
  return batch.is_number() ? std::to_string(batch.get<std::uint64_t>()) : std::string("never");
}

std::pair<nlohmann::json, nlohmann::json> measured_crossing(
    const CrossingPoints& l, const std::function<std::optional<std::uint64_t>(double)>& batch_at) {
  nlohmann::json batches = nlohmann::json::array();
  double p_eff = 0, w_eff = 0;
  for (const auto& [B, rates] : l.best) {
    batches.push_back(B);
    p_eff = std::max(p_eff, rates.first);
    w_eff = std::max(w_eff, rates.second);
  }
  nlohmann::json measured = {{"peak_flops_per_s", p_eff}, {"bandwidth_bytes_per_s", w_eff}, {"batch", nullptr}};
  const auto& [last_batch, last_rates] = *l.best.rbegin();
  if (l.best.size() < 2) {
    measured["text"] = "one batch only";
  } else if (last_rates.second >= 0.7 * w_eff) {
    measured["text"] = fmt::format("> {}", last_batch);  // still streaming at the largest batch measured
  } else {
    const auto m = batch_at(p_eff / w_eff);
    measured["batch"] = batch_or_null(m);
    measured["text"] = m ? std::to_string(*m) : std::string("never");
  }
  return {batches, measured};
}

nlohmann::json predicted_crossings(const CrossingPoints& l, const std::string& ceiling_used,
                                   const std::function<std::optional<std::uint64_t>(double)>& batch_at,
                                   const std::function<void(double ridge, nlohmann::json& out)>& extra) {
  auto predict = [&](const nlohmann::json& roof) {
    const double ridge = roof.value("ridge_flop_per_byte", 0.0);
    nlohmann::json j = {{"batch", batch_or_null(batch_at(ridge))}};
    if (extra) extra(ridge, j);
    j["ridge_flop_per_byte"] = ridge;
    j["compute_ceiling_source"] = roof.value("compute_ceiling_source", "");
    j["bandwidth_ceiling_source"] = roof.value("bandwidth_ceiling_source", "");
    return j;
  };
  nlohmann::json predicted = nlohmann::json::object();
  for (const auto& [source, roof] : l.by_source.items()) predicted[source] = predict(roof);
  if (!predicted.contains(ceiling_used) && l.in_use.is_object()) predicted[ceiling_used] = predict(l.in_use);
  return predicted;
}

}  // namespace phasebench
