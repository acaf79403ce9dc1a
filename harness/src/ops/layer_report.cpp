// What a whole-layer point reports (phasebench/report.hpp): its "layer" block,
// the measured layer and step times beside the analytical model's prediction for
// the run's GPU, and the summary section that lists them.
#include <fmt/format.h>

#include <string>

#include "phasebench/analytical.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/json_fields.hpp"
#include "phasebench/ops/layer.hpp"
#include "phasebench/ops/linear.hpp"
#include "phasebench/report.hpp"

namespace phasebench {

namespace {

// A time that may be unknown (kept as a flag and a value: std::optional<double>
// trips GCC's -Wmaybe-uninitialized here).
struct Secs {
  bool ok = false;
  double v = 0;
  void set(double x) {
    ok = true;
    v = x;
  }
  nlohmann::json json() const { return ok ? nlohmann::json(finite_or_null(v)) : nlohmann::json(nullptr); }
};

// A layer point's step times: the layer time times the model's layer count plus
// the vocabulary projection (lm_head, on the last token of each sequence), next
// to the analytical model's prediction for the run's GPU (datasheet ceilings).
// Both sides leave out the embedding gather and the final norm (a few MB).
nlohmann::json layer_json(const Point& p, double measured_layer_s, const RunView& run) {
  const auto& r = p.request;
  const auto arg = [&](const char* k) -> std::uint64_t { return p.args.count(k) ? p.args.at(k) : 0; };
  const std::uint64_t layers = arg("layers"), vocab = arg("vocab");
  const auto step = layer_step(r);
  nlohmann::json j;
  j["layers"] = layers;
  j["step"] = step.phase == Phase::prefill ? "ttft" : "per_token";
  j["measured_layer_s"] = measured_layer_s;
  // The prediction: analytical.hpp's estimate() for this model, batch and length
  // on the matched datasheet entry; the layer is the sum of its per-layer ops.
  Secs pred_layer, pred_lm_head;
  if (run.spec && layers > 0) {
    ModelConfig m = layer_model(r);
    m.name = p.model;
    m.layers = layers;
    m.vocab = vocab;
    EstimateInputs in;
    in.batch = step.batch;
    in.prompt = step.phase == Phase::prefill ? step.new_tokens : 1;
    in.context = step.phase == Phase::decode ? step.context : 1;
    in.dtype = in.kv_dtype = r.dtype;
    in.ceiling = CeilingSource::datasheet;
    try {
      const auto e = estimate(m, *run.spec, in);
      const auto& ph = step.phase == Phase::prefill ? e.prefill : e.decode;
      double sum = 0;
      for (const auto& o : ph.ops) {
        if (o.op.name == "lm_head")
          pred_lm_head.set(o.time_s);
        else if (o.op.name != "embed" && o.op.name != "final_norm")
          sum += o.time_s;
      }
      pred_layer.set(sum);
      j["gpu_spec"] = run.spec->key;
    } catch (const std::exception& ex) {
      j["prediction_error"] = ex.what();
      pred_layer = Secs{};
      pred_lm_head = Secs{};
    }
  }
  j["predicted_layer_s"] = pred_layer.json();
  j["ceiling_source"] = pred_layer.ok ? nlohmann::json("datasheet") : nlohmann::json(nullptr);
  // lm_head: the fastest measured decode GEMV/linear point of the same model,
  // batch and dtype in this run; else the predicted time.
  Secs lm_head;
  std::string lm_source;
  run.each_point([&](const Point& q) {
    if (q.op != kLinear || q.phase != "decode" || q.target != "lm_head" || q.model != p.model || q.request.dtype != r.dtype) return;
    if (!q.args.count("batch") || q.args.at("batch") != step.batch) return;
    const auto t = run.median_s(q);
    if (t && (!lm_head.ok || *t < lm_head.v)) {
      lm_head.set(*t);
      lm_source = "measured: " + q.name;
    }
  });
  if (!lm_head.ok && pred_lm_head.ok) {
    lm_head = pred_lm_head;
    lm_source = "predicted (no lm_head GEMV point of this model, batch and dtype in the run)";
  }
  j["lm_head_s"] = lm_head.json();
  j["lm_head_source"] = lm_head.ok ? nlohmann::json(lm_source) : nlohmann::json(nullptr);
  Secs measured_step, predicted_step;
  if (lm_head.ok && layers > 0) measured_step.set(measured_layer_s * static_cast<double>(layers) + lm_head.v);
  if (pred_layer.ok && pred_lm_head.ok) predicted_step.set(pred_layer.v * static_cast<double>(layers) + pred_lm_head.v);
  j["measured_step_s"] = measured_step.json();
  j["predicted_step_s"] = predicted_step.json();
  j["ratio"] = measured_step.ok && predicted_step.ok && predicted_step.v > 0
                   ? nlohmann::json(finite_or_null(measured_step.v / predicted_step.v))
                   : nlohmann::json(nullptr);
  j["layer_ratio"] = pred_layer.ok && pred_layer.v > 0 ? nlohmann::json(finite_or_null(measured_layer_s / pred_layer.v))
                                                       : nlohmann::json(nullptr);
  // What the measured layer runs beyond the minimum bytes of layer_ops (and the
  // prediction): q, k and v are copied out of the fused qkv buffer (one read
  // and one write of it), because the attention kernels take packed q, k, v.
  const auto M = step.batch * step.new_tokens;
  const auto qkv_elems = M * (r.shape["Hq"] + 2 * r.shape["Hkv"]) * r.shape["D"];
  j["unmodelled_bytes"] = {{"qkv_split", 2 * qkv_elems * element_bytes(r.dtype)}};
  j["excluded"] = "embedding gather and final norm (measured and predicted alike); residual adds (not in layer_ops)";
  nlohmann::json out = nlohmann::json::object();
  out["layer"] = std::move(j);
  return out;
}

// A layer point stands for `layers` of a model step (J/token per step).
double per_step(const nlohmann::json& p) {
  return p.contains("layer") ? p.at("layer").value("layers", 1.0) : 1.0;
}

// Whole layers: the measured layer and step times against the analytical model's.
std::string layers_section(const SummaryInput& in) {
  std::string rows;
  auto ms = [](const nlohmann::json& v) {
    return v.is_number() ? fmt::format("{:.3f} ms", v.get<double>() * 1e3) : std::string("-");
  };
  for (const auto* b : in.standing) {
    const auto& p = b->at("phasebench");
    if (p.value("status", "") != "ok" || !p.contains("layer")) continue;
    const auto& l = p.at("layer");
    const auto& ratio = l.at("ratio");
    rows += fmt::format("  {:<58} {:>12} {:>12} {:>12} {:>7}\n", b->value("name", ""), ms(l.at("measured_layer_s")),
                        ms(l.at("measured_step_s")), ms(l.at("predicted_step_s")),
                        ratio.is_number() ? fmt::format("{:.2f}", ratio.get<double>()) : std::string("-"));
  }
  if (rows.empty()) return "";
  std::string out =
      "\nwhole layer: measured vs predicted (step = layer x layers + lm_head; prefill step = TTFT,\n"
      "  decode step = per-token latency; predicted from the datasheet roofline of the matched GPU)\n";
  out += fmt::format("  {:<58} {:>12} {:>12} {:>12} {:>7}\n", "point", "layer", "step", "predicted", "ratio");
  return out + rows;
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(layer_report) {
  using namespace phasebench;
  registry.point_report(PointReport{kLayer, layer_json, per_step});
  registry.section(SummarySection{"whole layer", 80, layers_section});
}
