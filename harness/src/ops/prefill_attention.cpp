// Causal prefill attention over S prompt tokens, no cached prefix (DESIGN:
// 2*B*Hq*D*S*(S+1) FLOPs; a*B*S*D*(2*Hq + 2*Hkv) bytes). q and out [B, S, Hq, D],
// k and v [B, S, Hkv, D]. One sweep group: batch x prompt, our flash kernel, the
// vendor path that materialises the scores and the attention libraries' rows
// (FlashInfer, cuDNN), for the grouped-query attention models.
#include "phasebench/ops/prefill_attention.hpp"
#include "phasebench/ops/shared_axes.hpp"
#include "phasebench/step_time.hpp"

namespace phasebench {

OpRequest prefill_attention_request(const PrefillAttentionShape& s, DType dtype, Impl impl, std::uint64_t seed) {
  OpRequest r;
  r.kind = kPrefillAttention;
  r.phase = Phase::prefill;
  r.dtype = dtype;
  r.impl = impl;
  r.shape = s.shape();
  r.seed = seed;
  return r;
}

namespace {

OpCost cost(const OpRequest& r) { return prefill_attention_cost(PrefillAttentionShape::of(r.shape), element_bytes(r.dtype)); }

}  // namespace

namespace {

// Serving (step_time.hpp): causal prefill with no prefix, window or chunks, on the
// curve of its heads, head_dim and type, along batch and prompt.
std::string prefill_curve(std::uint64_t Hq, std::uint64_t Hkv, std::uint64_t D, const std::string& dtype) {
  return "prefill_attention/" + std::to_string(Hq) + "/" + std::to_string(Hkv) + "/" + std::to_string(D) + "/" + dtype;
}

std::optional<StepMatch> prefill_point(const nlohmann::json& p) {
  const auto B = point_size(p, "B"), Hq = point_size(p, "Hq"), Hkv = point_size(p, "Hkv"), S = point_size(p, "S"),
             D = point_size(p, "D");
  if (!B || !Hq || !Hkv || !S || !D) return std::nullopt;
  return StepMatch{prefill_curve(*Hq, *Hkv, *D, point_dtype(p)), {static_cast<double>(*B), static_cast<double>(*S)}};
}

std::optional<StepMatch> prefill_step_op(const StepOpView& v) {
  const auto& s = v.op.shape;
  if (v.op.kind != "prefill_attention" || s.has("window") || s.has("chunk") || s.has("Dv")) return std::nullopt;
  return StepMatch{prefill_curve(s["Hq"], s["Hkv"], s["D"], std::string(to_string(v.dtype))),
                   {static_cast<double>(s["B"]), static_cast<double>(s["S"])}};
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(prefill_attention) {
  using namespace phasebench;
  // FlashInfer and cuDNN have rows on CUDA (kernels/cuda/prefill_attention_<library>.*).
  OpDecl d{kPrefillAttention, {"B", "Hq", "Hkv", "S", "D"}, cost, [](const OpRequest& r) { return cost(r).bytes.total(); },
           {}, {}, {Impl::flashinfer, Impl::cudnn}};
  d.match_point = prefill_point;
  d.match_step_op = prefill_step_op;
  registry.declare(std::move(d));
  registry.group(SweepGroup{
      .name = "prefill_attention",
      .help = "causal prefill attention over batch x prompt (ours, the cuBLAS path, FlashInfer and cuDNN)",
      .order = 50,
      .takes = grouped_query_attention,
      .takes_what = kGroupedQueryAttentionModels,
      .gpu_models = attention_gpu_models(),
      .axes = {prefill_batch_axis("batch", "batch sizes"),
               AxisDecl{.name = "prompt",
                        .help = "prompt lengths",
                        .gpu_default = {512, 1024, 2048, 4096, 8192},
                        .cpu_default = {128, 512},
                        .alias = "--prefill-attention-prompts"}},
      .points = [](const SweepScope& sc) {
        const ModelConfig& m = *sc.model;
        std::vector<Point> pts;
        const auto impls = sc.impls(prefill_attention_request({1, m.heads, m.kv_heads, 1, m.head_dim}, sc.dtype, Impl::own), true);
        for (Impl impl : impls)
          for (auto B : (*sc.axes)["batch"])
            for (auto S : (*sc.axes)["prompt"])
              pts.push_back(make_point("prefill", m.name, "", m.name,
                                       prefill_attention_request({B, m.heads, m.kv_heads, S, m.head_dim}, sc.dtype, impl),
                                       {{"batch", B, "batch"}, {"prompt", S, "prompt"}}, true));
        return pts;
      }});
}
