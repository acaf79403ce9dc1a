// What a whole-layer point reports (phasebench/report.hpp): its "layer" block,
// the measured layer and step times beside the analytical model's prediction for
// the run's GPU (sharded over the point's GPUs, all-reduces and their latency
// included), a tensor-parallel point beside the same point on one GPU, and the
// summary sections that list them.
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
  const std::uint64_t layers = arg("layers"), vocab = arg("vocab"), gpus = layer_gpus(r);
  const auto step = layer_step(r);
  nlohmann::json j;
  j["layers"] = layers;
  j["gpus"] = gpus;
  j["step"] = step.phase == Phase::prefill ? "ttft" : "per_token";
  j["measured_layer_s"] = measured_layer_s;
  // The prediction: analytical.hpp's estimate() for this model, batch and length
  // on the matched datasheet entry (with --tp of the point's GPUs); the layer is
  // the sum of its per-layer ops, the all-reduces' link time and latency included.
  Secs pred_layer, pred_lm_head, pred_all_reduce;
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
    in.tp = gpus;
    try {
      const auto e = estimate(m, *run.spec, in);
      const auto& ph = step.phase == Phase::prefill ? e.prefill : e.decode;
      double sum = 0, lm = 0, all_reduce = 0;
      for (const auto& o : ph.ops) {
        // Outside a layer: the embedding (and its all-reduce), the final norm; the
        // vocabulary projection (and, sharded, the logits' all-gather) is lm_head's.
        if (o.op.name == "lm_head" || o.op.name == "logits_all_gather")
          lm += o.time_s;
        else if (o.op.name != "embed" && o.op.name != "final_norm" && o.op.name != "embed_all_reduce")
          sum += o.time_s;
        if (o.op.kind == "all_reduce" && o.op.name != "embed_all_reduce") all_reduce += o.time_s;
      }
      pred_layer.set(sum);
      pred_lm_head.set(lm);
      if (gpus > 1) {
        pred_all_reduce.set(all_reduce);
        j["latency_source"] = LinkModel::of(*run.spec).latency_source;
      }
      j["gpu_spec"] = run.spec->key;
    } catch (const std::exception& ex) {
      j["prediction_error"] = ex.what();
      pred_layer = Secs{};
      pred_lm_head = Secs{};
      pred_all_reduce = Secs{};
    }
  }
  if (gpus > 1) j["predicted_all_reduce_s"] = pred_all_reduce.json();
  j["predicted_layer_s"] = pred_layer.json();
  j["ceiling_source"] = pred_layer.ok ? nlohmann::json("datasheet") : nlohmann::json(nullptr);
  // lm_head: the fastest measured decode GEMV/linear point of the same model,
  // batch and dtype in this run (one GPU's: the whole vocabulary); else the predicted time.
  Secs lm_head;
  std::string lm_source;
  run.each_point([&](const Point& q) {
    if (gpus > 1) return;  // sharded, lm_head is the vocabulary's shard and the logits' all-gather: predicted
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
    lm_source = gpus > 1 ? "predicted (sharded over the GPUs: the vocabulary's shard and the logits' all-gather)"
                         : "predicted (no lm_head GEMV point of this model, batch and dtype in the run)";
  }
  // Sharded: the same layer point on one GPU in this run, and the speedup over it.
  if (gpus > 1) {
    Secs one;
    std::string one_name;
    run.each_point([&](const Point& q) {
      if (q.op != kLayer || layer_gpus(q.request) != 1 || q.model != p.model || q.phase != p.phase ||
          q.request.dtype != r.dtype || q.request.shape["B"] != r.shape["B"] || q.request.shape["S"] != r.shape["S"] ||
          q.request.shape["L"] != r.shape["L"])
        return;
      if (const auto t = run.median_s(q)) {
        one.set(*t);
        one_name = q.name;
      }
    });
    j["one_gpu_layer_s"] = one.json();
    j["one_gpu_point"] = one.ok ? nlohmann::json(one_name) : nlohmann::json(nullptr);
    const bool speed = one.ok && measured_layer_s > 0;
    j["speedup"] = speed ? nlohmann::json(finite_or_null(one.v / measured_layer_s)) : nlohmann::json(nullptr);
    j["scaling_efficiency"] =
        speed ? nlohmann::json(finite_or_null(one.v / measured_layer_s / static_cast<double>(gpus))) : nlohmann::json(nullptr);
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
  auto ms = [](const nlohmann::json& v) { return number_or_dash(v, "{:.3f} ms", 1e3); };
  for (const auto* b : in.standing) {
    const auto& p = b->at("phasebench");
    if (p.value("status", "") != "ok" || !p.contains("layer")) continue;
    const auto& l = p.at("layer");
    const auto& ratio = l.at("ratio");
    rows += fmt::format("  {:<58} {:>12} {:>12} {:>12} {:>7}\n", b->value("name", ""), ms(l.at("measured_layer_s")),
                        ms(l.at("measured_step_s")), ms(l.at("predicted_step_s")),
                        number_or_dash(ratio, "{:.2f}"));
  }
  if (rows.empty()) return "";
  std::string out =
      "\nwhole layer: measured vs predicted (step = layer x layers + lm_head; prefill step = TTFT,\n"
      "  decode step = per-token latency; predicted from the datasheet roofline of the matched GPU)\n";
  out += fmt::format("  {:<58} {:>12} {:>12} {:>12} {:>7}\n", "point", "layer", "step", "predicted", "ratio");
  return out + rows;
}

// Tensor-parallel layers: each beside the same layer on one GPU and the model.
std::string tensor_parallel_section(const SummaryInput& in) {
  std::string rows;
  auto ms = [](const nlohmann::json& v) { return number_or_dash(v, "{:.3f} ms", 1e3); };
  for (const auto* b : in.standing) {
    const auto& p = b->at("phasebench");
    if (p.value("status", "") != "ok" || !p.contains("layer") || p.at("layer").value("gpus", 1) <= 1) continue;
    const auto& l = p.at("layer");
    rows += fmt::format("  {:<58} {:>4} {:>12} {:>12} {:>8} {:>12} {:>12}\n", b->value("name", ""), l.value("gpus", 1),
                        ms(l.at("measured_layer_s")), ms(l.value("one_gpu_layer_s", nlohmann::json())),
                        number_or_dash(l.value("speedup", nlohmann::json()), "{:.2f}x"), ms(l.at("predicted_layer_s")),
                        ms(l.value("predicted_all_reduce_s", nlohmann::json())));
  }
  if (rows.empty()) return "";
  std::string out =
      "\ntensor-parallel layers: sharded over N GPUs (NCCL all-reduces after attention and after the MLP), timed as\n"
      "  the step sees it (the slowest rank), beside the same layer on one GPU and the model (all-reduce: its part)\n";
  out += fmt::format("  {:<58} {:>4} {:>12} {:>12} {:>8} {:>12} {:>12}\n", "point", "gpus", "layer", "1 GPU", "speedup",
                     "predicted", "all-reduce");
  return out + rows;
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(layer_report) {
  using namespace phasebench;
  registry.point_report(PointReport{kLayer, layer_json, per_step});
  registry.section(SummarySection{"whole layer", 80, layers_section});
  registry.section(SummarySection{"tensor-parallel layers", 81, tensor_parallel_section});
}
