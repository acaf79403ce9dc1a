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
  if (p.contains("bound") && p.at("bound").is_string()) bound[batch] = p.at("bound").get<std::string>();
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
    return {batches, measured};
  }
  // The layer's own ridge: a batch (nothing: never), or beyond the largest batch measured.
  std::optional<std::uint64_t> own;
  bool beyond = false;
  if (last_rates.second >= 0.7 * w_eff)
    beyond = true;  // still streaming at the largest batch measured
  else
    own = batch_at(p_eff / w_eff);
  const std::string own_text = beyond ? fmt::format("> {}", last_batch) : own ? std::to_string(*own) : "never";
  // The labels' interval (labels grow with the intensity, so with the batch).
  std::optional<std::uint64_t> last_memory, first_compute;
  for (const auto& [B, b] : l.bound) {
    if (b == "compute" && !first_compute) first_compute = B;
    if (b == "memory" && (!first_compute || B < *first_compute)) last_memory = B;
  }
  measured["labels"] = {{"last_memory", batch_or_null(last_memory)}, {"first_compute", batch_or_null(first_compute)}};
  std::optional<std::uint64_t> at = own;
  if (first_compute && (beyond || !own || *own > *first_compute)) at = first_compute;  // labelled compute-bound by then
  if (last_memory && at && *at <= *last_memory) at = *last_memory + 1;                   // still labelled memory-bound there
  const bool moved = at != own || (beyond && at);
  if (beyond && !moved) {
    measured["text"] = own_text;
  } else {
    measured["batch"] = batch_or_null(at);
    measured["text"] = at ? std::to_string(*at) : std::string("never");
  }
  if (moved) measured["own_ridge"] = {{"batch", batch_or_null(beyond ? std::nullopt : own)}, {"text", own_text}};
  return {batches, measured};
}

std::string own_ridge_notes(const nlohmann::json& records) {
  std::string out;
  for (const auto& x : records) {
    const auto& m = x.value("measured", nlohmann::json::object());
    if (!m.contains("own_ridge")) continue;
    const auto& l = m.value("labels", nlohmann::json::object());
    const auto last = l.value("last_memory", nlohmann::json()), first = l.value("first_compute", nlohmann::json());
    std::string labels;
    if (last.is_number()) labels = fmt::format("memory-bound up to batch {}", last.get<std::uint64_t>());
    if (first.is_number())
      labels += (labels.empty() ? "" : " and ") + fmt::format("compute-bound from batch {}", first.get<std::uint64_t>());
    out += fmt::format("    {} {}: its own best rates (P_eff/W_eff) alone would say {}; its points are labelled {}\n",
                       x.value("layer", ""), x.value("dtype", ""), m.at("own_ridge").value("text", "-"), labels);
  }
  if (out.empty()) return out;
  return "  where the layer's own ridge and its points' bound labels (the ridge P/W of the ceilings in use) disagree,\n"
         "  the measured crossing is the labels' nearer end (the layer never reaches P, or streams below W):\n" +
         out;
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
