// A whole transformer layer (op kind "layer"): the ops of model.hpp's layer_ops
// run in sequence for a prefill step (batch x prompt) or a decode step (batch at
// a context), on one GPU or tensor-parallel over `gpus`; its cost is the sum of
// one GPU's ops. One sweep group: prefill at prefill_batch x prompt and decode at
// decode_batch x context, for the dense models of the run, at each GPU count;
// args carry the model's layers and vocabulary (step times).
#include "phasebench/ops/layer.hpp"

#include "phasebench/checked.hpp"
#include "phasebench/ops/shared_axes.hpp"

namespace phasebench {

OpRequest layer_request(const ModelConfig& m, Phase phase, std::uint64_t batch, std::uint64_t n, DType dtype,
                        std::uint64_t seed, std::uint64_t gpus) {
  const bool prefill = phase == Phase::prefill;
  OpRequest r;
  r.kind = kLayer;
  r.phase = phase;
  r.dtype = dtype;
  r.impl = Impl::own;
  r.shape = {{"B", batch},           {"S", prefill ? n : 1},   {"L", prefill ? 0 : n}, {"h", m.hidden},
             {"I", m.intermediate}, {"Hq", m.heads},           {"Hkv", m.kv_heads},    {"D", m.head_dim}};
  if (gpus != 1) r.shape.set("gpus", gpus);
  r.options = OpOptions(LayerOptions{m.norms_per_layer});
  r.seed = seed;
  return r;
}

ModelConfig layer_model(const OpRequest& r) {
  ModelConfig m;
  m.name = "layer";
  m.hidden = r.shape["h"];
  m.intermediate = r.shape["I"];
  m.layers = 1;
  m.heads = r.shape["Hq"];
  m.kv_heads = r.shape["Hkv"];
  m.head_dim = r.shape["D"];
  m.norms_per_layer = r.options.as<LayerOptions>().norms_per_layer;
  return m;
}

std::uint64_t layer_gpus(const OpRequest& r) { return r.shape.get("gpus", 1); }

ModelConfig layer_shard(const OpRequest& r) { return tensor_parallel_shard(layer_model(r), layer_gpus(r)); }

StepShape layer_step(const OpRequest& r) {
  if (r.phase == Phase::prefill) return {Phase::prefill, r.shape["B"], r.shape["S"], 0};
  return {Phase::decode, r.shape["B"], 1, r.shape["L"]};
}

std::vector<LayerOp> layer_request_ops(const OpRequest& r) {
  return layer_ops(layer_shard(r), layer_step(r), Precision::from(r.dtype, r.dtype));
}

namespace {

OpCost cost(const OpRequest& r) {
  OpCost c;
  for (const auto& op : layer_request_ops(r)) c += op.cost;
  return c;
}

// Every buffer a layer benchmark allocates on one GPU: the shard's weights, the
// activations between its ops (one buffer each, none reused), the contiguous
// KV cache and the positions.
std::uint64_t footprint(const OpRequest& r) {
  const ModelConfig m = layer_shard(r);
  const StepShape st = layer_step(r);
  const auto M = mul(st.batch, st.new_tokens, "tokens");
  const auto h = m.hidden, I = m.intermediate;
  const auto Nq = mul(m.heads, m.head_dim), Nkv = mul(m.kv_heads, m.head_dim), Nqkv = add(Nq, mul(2, Nkv));
  std::uint64_t weights = 0;
  for (const auto& w : layer_weights(m)) weights = add(weights, w.elements(), "layer weights");
  // x, attn-normed x, qkv, q, k, v, attention out, o, mlp-normed, gate_up, act, out
  std::uint64_t per_token = 0;
  for (auto n : {h, h, Nqkv, Nq, mul(2, Nkv), Nq, h, h, mul(2, I), I, h}) per_token = add(per_token, n, "layer activations");
  const auto cap = st.phase == Phase::prefill ? st.new_tokens : st.context;
  const auto cache = mul({2, st.batch, m.kv_heads, cap, m.head_dim}, "layer KV cache");
  const auto elements = add(add(weights, mul(M, per_token, "layer activations")), cache, "layer bytes");
  return add(mul(element_bytes(r.dtype), elements, "layer bytes"), mul(4, M));
}

nlohmann::json shape_json(const OpRequest& r) {
  nlohmann::json j = {{"phase", to_string(r.phase)}};
  for (const auto& [k, v] : r.shape.dims()) j[k] = v;
  return j;
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(layer) {
  using namespace phasebench;
  // "gpus" only in tensor-parallel requests.
  registry.declare(OpDecl{kLayer, {"B", "S", "L", "h", "I", "Hq", "Hkv", "D", "gpus"}, cost, footprint, shape_json});
  registry.group(SweepGroup{
      .name = "layer",
      .help = "whole layers of dense, full-attention models: prefill at prefill_batch x prompt, decode at decode_batch x "
              "context; tensor-parallel over N GPUs with --gpus 1,N",
      .order = 60,
      .axes = {prefill_batch_axis("prefill_batch", "prefill batch sizes"), prompt_axis("prompt", "prefill prompt lengths"),
               attention_batch_axis("decode_batch", "decode batch sizes"), context_axis("context", "decode context lengths"),
               gpus_axis("GPUs each layer is sharded over (tensor parallelism, NCCL all-reduces; 1: one GPU)", {1}, {1})},
      .points = [](const SweepScope& sc) {
        const ModelConfig& m = *sc.model;
        std::vector<Point> pts;
        if (!sc.runs(layer_request(m, Phase::decode, 1, 1, sc.dtype), Impl::own)) return pts;
        // The whole-layer op is a dense, full-attention layer: models with other
        // layers (experts, windows, chunks, q/k norms, sinks, MLA) have no whole-layer points.
        if (m.experts || !m.windows.empty() || !m.chunks.empty() || m.qk_norm || m.attention_sinks || m.uses_mla())
          return pts;
        // One GPU's points are named as before; a sharded one ends in /gpus:N.
        auto add_point = [&](Phase ph, std::uint64_t B, std::uint64_t n, std::uint64_t g) {
          const bool prefill = ph == Phase::prefill;
          std::vector<PointArg> args{{"batch", B, "batch"},
                                     {prefill ? "prompt" : "context", n, prefill ? "prompt" : "context"},
                                     {"layers", m.layers, ""},
                                     {"vocab", m.vocab, ""}};
          if (g > 1) args.push_back({"gpus", g, "gpus"});
          auto p = make_point(std::string(to_string(ph)), m.name, "", m.name,
                              layer_request(m, ph, B, n, sc.dtype, 0x5eed, g), args, false);
          p.request.name = p.name;
          pts.push_back(std::move(p));
        };
        // A GPU count the model's heads or widths do not divide by makes points that
        // are skipped with tensor_parallel_shard's reason (their cost cannot be formed).
        for (auto g : (*sc.axes)["gpus"]) {
          for (auto B : (*sc.axes)["prefill_batch"])
            for (auto S : (*sc.axes)["prompt"]) add_point(Phase::prefill, B, S, g);
          for (auto B : (*sc.axes)["decode_batch"])
            for (auto L : (*sc.axes)["context"]) add_point(Phase::decode, B, L, g);
        }
        return pts;
      }});
}
