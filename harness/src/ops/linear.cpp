// The linear layer Y[M,N] = X[M,K] W^T (DESIGN: 2MNK FLOPs; w*N*K + a*M*K + a*M*N
// bytes, the output in linear_output_type; block-scaled 4-bit X and W with their
// scales, matrix_bytes). Three sweep groups: the prefill GEMMs of each projection
// over batch x prompt (and over element type: the run's, nvfp4, mxfp4), the decode
// GEMVs over batch (our own kernel and the vendor row), and free-form --shape M,N,K.
#include "phasebench/ops/linear.hpp"

#include <algorithm>
#include <utility>
#include <string>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/shared_axes.hpp"
#include "phasebench/step_time.hpp"

namespace phasebench {

OpRequest linear_request(const LinearShape& s, DType dtype, Impl impl, std::uint64_t seed) {
  OpRequest r;
  r.kind = kLinear;
  r.dtype = dtype;
  r.impl = impl;
  r.shape = s.shape();
  r.seed = seed;
  r.phase = s.M <= 256 ? Phase::decode : Phase::prefill;  // informative only
  return r;
}

OpRequest weight_only_gemv_request(const char* kind, const LinearShape& s, OpOptions options, Impl impl,
                                   std::uint64_t seed) {
  OpRequest r;
  r.kind = kind;
  r.dtype = DType::bf16;  // activations; the weights are the options' format
  r.impl = impl;
  r.shape = s.shape();
  r.options = std::move(options);
  r.seed = seed;
  r.phase = Phase::decode;
  return r;
}

namespace {

OpCost cost(const OpRequest& r) {
  if (block_scaling(r.dtype)) return block_scaled_linear_cost(LinearShape::of(r.shape), r.dtype);
  const auto e = element_bytes(r.dtype);
  return linear_cost(LinearShape::of(r.shape), e, e, element_bytes(linear_output_type(r.dtype)));
}

// The projections of a model at M tokens in element type `dtype`, each with the
// implementations that run it: decode GEMVs our own kernel where it applies (and
// the vendor row beside it when `beside_own`), prefill GEMMs the vendor library only.
std::vector<Point> projection_points(const SweepScope& sc, Phase phase, std::uint64_t M, bool beside_own,
                                     const std::vector<PointArg>& args, DType dtype) {
  const ModelConfig& m = *sc.model;
  const bool prefill = phase == Phase::prefill;
  std::vector<Point> pts;
  // A model whose every layer is a mixture of experts has no dense MLP to benchmark.
  for (const auto& lin : linear_ops(m, M, Precision::from(sc.dtype, sc.dtype), m.all_layers_moe())) {
    if (prefill && lin.name == "lm_head") continue;  // prefill computes logits for the last token only
    OpRequest r = linear_request(LinearShape::of(lin.shape), dtype, Impl::own);
    r.phase = phase;
    auto impls = sc.impls(r, beside_own || prefill);
    if (prefill) impls.erase(std::remove(impls.begin(), impls.end(), Impl::own), impls.end());  // GEMMs: the library's
    for (Impl impl : impls) {
      r.impl = impl;
      pts.push_back(make_point(prefill ? "prefill" : "decode", m.name, lin.name,
                               m.name + "." + lin.name, r, args, true));
    }
  }
  return pts;
}

// The prefill GEMMs' element types (the axis prefill_linear.dtype): `run`, the
// run's --dtype, and the block-scaled 4-bit types a run's --dtype cannot name.
constexpr const char* kDtypeWords = "run, nvfp4 or mxfp4";

AxisDecl prefill_dtype_axis() {
  return AxisDecl{
      .name = "dtype",
      .help = "the GEMMs' element types: run (the run's --dtype), nvfp4, mxfp4 (block-scaled 4-bit X and W, "
              "bf16 Y: cuBLASLt's block-scaled matmul, compute capability 10.0+)",
      .text = true,
      .gpu_text = {"run", "nvfp4", "mxfp4"},
      .cpu_text = {"run"},
      .check_text =
          [](const std::vector<std::string>& words, const std::string&) {
            // The sweep puts the axis's name before the message.
            for (const auto& w : words)
              if (w != "run" && w != "nvfp4" && w != "mxfp4")
                throw InputError("unknown element type " + quote_value(w) + "; use " + kDtypeWords +
                                 " (run: the run's --dtype)");
          },
  };
}

// The element types of this scope's prefill GEMMs, each once: the scope's dtype for
// `run`; nvfp4 and mxfp4 only in the scope of the run's first --dtype, so that a run
// of several dtypes makes each block-scaled point once.
std::vector<DType> prefill_dtypes(const SweepScope& sc) {
  std::vector<DType> out;
  const bool first = sc.dtypes.empty() || sc.dtypes.front() == sc.dtype;
  for (const auto& w : sc.axes->text("dtype")) {
    const DType t = w == "run" ? sc.dtype : parse_dtype(w);
    if (w != "run" && !first) continue;
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

}  // namespace

namespace {

// Serving (step_time.hpp): a linear layer's points lie on the curve of its N x K
// and element type, along M; the model's plain-weight linear ops on the same.
std::string linear_curve(std::uint64_t N, std::uint64_t K, const std::string& dtype) {
  return "linear/" + std::to_string(N) + "x" + std::to_string(K) + "/" + dtype;
}

std::optional<StepMatch> linear_point(const nlohmann::json& p) {
  const auto M = point_size(p, "M"), N = point_size(p, "N"), K = point_size(p, "K");
  if (!M || !N || !K) return std::nullopt;
  return StepMatch{linear_curve(*N, *K, point_dtype(p)), {static_cast<double>(*M)}};
}

std::optional<StepMatch> linear_step_op(const StepOpView& v) {
  // Quantized weights are other operations' points (linear_int4, linear_fp4).
  if (v.op.kind != "linear" || v.op.weights != to_string(v.op.compute)) return std::nullopt;
  const auto& s = v.op.shape;
  return StepMatch{linear_curve(s["N"], s["K"], std::string(to_string(v.op.compute))), {static_cast<double>(s["M"])}};
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(linear) {
  using namespace phasebench;
  OpDecl linear{kLinear, {"M", "N", "K"}, cost, [](const OpRequest& r) { return cost(r).bytes.total(); }, {}};
  linear.match_point = linear_point;
  linear.match_step_op = linear_step_op;
  registry.declare(std::move(linear));
  registry.group(SweepGroup{
      .name = "prefill_linear",
      .help = "the prefill GEMMs of each projection over batch x prompt and element type (vendor library)",
      .order = 10,
      .axes = {prefill_batch_axis("batch", "batch sizes"), prompt_axis("prompt", "prompt lengths"),
               prefill_dtype_axis()},
      .points = [](const SweepScope& sc) {
        std::vector<Point> pts;
        for (DType t : prefill_dtypes(sc))
          for (auto B : (*sc.axes)["batch"])
            for (auto S : (*sc.axes)["prompt"]) {
              auto more = projection_points(sc, Phase::prefill, mul(B, S, "tokens"), false,
                                            {{"batch", B, "batch"}, {"prompt", S, "prompt"}}, t);
              pts.insert(pts.end(), more.begin(), more.end());
            }
        return pts;
      }});
  registry.group(SweepGroup{
      .name = "decode_linear",
      .help = "the decode GEMVs of each projection over batch (our kernel, the vendor row beside it)",
      .order = 20,
      .axes = {AxisDecl{.name = "batch",
                        .help = "GEMV batch sizes",
                        .gpu_default = {1, 2, 4, 8, 16, 32, 64, 128, 256},
                        .cpu_default = {1, 2, 4, 8, 16, 32, 64},
                        .alias = "--decode-batches"}},
      .points = [](const SweepScope& sc) {
        std::vector<Point> pts;
        for (auto B : (*sc.axes)["batch"]) {
          auto more = projection_points(sc, Phase::decode, B, sc.compare_blas, {{"batch", B, "batch"}}, sc.dtype);
          pts.insert(pts.end(), more.begin(), more.end());
        }
        return pts;
      }});
  registry.group(SweepGroup{
      .name = "free",
      .help = "free-form linear shapes given with --shape M,N,K (vendor library, and our GEMV where it applies)",
      .order = 70,
      .per_model = false,
      .from_shapes = true,
      .points = [](const SweepScope& sc) {
        std::vector<Point> pts;
        for (const auto& s : *sc.shapes) {
          OpRequest r = linear_request(s, sc.dtype, Impl::own);
          auto impls = sc.impls(r, true);
          for (auto it = impls.rbegin(); it != impls.rend(); ++it) {  // the vendor row first
            r.impl = *it;
            const std::string target = std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K);
            pts.push_back(make_point("free", "custom", target, target, r,
                                     {{"M", s.M, ""}, {"N", s.N, ""}, {"K", s.K, ""}}, true));
          }
        }
        return pts;
      }});
}
