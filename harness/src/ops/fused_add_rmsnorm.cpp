// The fused residual add and RMSNorm (ops/fused_add_rmsnorm.hpp): 0 FLOPs; reads
// x and residual (a*2*M*h) and the weight (a*h), writes residual_out and y
// (a*2*M*h). One sweep group: the decode step's fused add + RMSNorm over batch,
// at each model's hidden size.
#include <algorithm>
#include <iterator>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/fused_add_rmsnorm.hpp"
#include "phasebench/step_time.hpp"

namespace phasebench {

OpRequest fused_add_rmsnorm_request(std::uint64_t M, std::uint64_t h, DType dtype, std::uint64_t seed) {
  OpRequest r;
  r.kind = kFusedAddRmsnorm;
  r.phase = Phase::decode;
  r.dtype = dtype;
  r.impl = Impl::own;
  r.shape = {{"M", M}, {"h", h}};
  r.options = OpOptions(FusedAddRmsnormOptions{});
  r.seed = seed;
  return r;
}

namespace {

OpCost cost(const OpRequest& r) {
  const auto a = element_bytes(r.dtype), M = r.shape["M"], h = r.shape["h"];
  const auto rows = mul({2, a, M, h}, "fused add + RMSNorm bytes");
  return elementwise_cost(rows, mul(a, h, "RMSNorm weight bytes"), rows);
}

}  // namespace

namespace {

// Serving (step_time.hpp): the layers' RMSNorms over the hidden size (engines fuse
// the residual add into them), on the curve of h and type, along the tokens.
std::optional<StepMatch> norm_point(const nlohmann::json& p) {
  const auto M = point_size(p, "M"), h = point_size(p, "h");
  if (!M || !h) return std::nullopt;
  return StepMatch{"rmsnorm/" + std::to_string(*h) + "/" + point_dtype(p), {static_cast<double>(*M)}};
}

std::optional<StepMatch> norm_step_op(const StepOpView& v) {
  static const char* const kHiddenNorms[] = {"attn_norm", "mlp_norm", "final_norm", "post_attn_norm", "post_mlp_norm"};
  if (std::find(std::begin(kHiddenNorms), std::end(kHiddenNorms), v.op.name) == std::end(kHiddenNorms)) return std::nullopt;
  return StepMatch{"rmsnorm/" + std::to_string(v.model.hidden) + "/" + std::string(to_string(v.dtype)),
                   {static_cast<double>(v.tokens)}};
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(fused_add_rmsnorm) {
  using namespace phasebench;
  OpDecl d{kFusedAddRmsnorm, {"M", "h"}, cost, [](const OpRequest& r) { return cost(r).bytes.total(); }, {}};
  d.match_point = norm_point;
  d.match_step_op = norm_step_op;
  registry.declare(std::move(d));
  registry.group(SweepGroup{
      .name = "fused_add_rmsnorm",
      .help = "the decode step's fused residual add + RMSNorm over batch, at the model's hidden size",
      .order = 45,
      .axes = {AxisDecl{.name = "batch",
                        .help = "batch sizes (tokens)",
                        .gpu_default = {1, 16, 256, 4096},
                        .cpu_default = {1, 16, 256},
                        .check =
                            [](const std::vector<std::uint64_t>& v, const std::string& what) {
                              for (auto x : v)
                                if (x == 0) throw InputError(what + ": a batch of at least 1 token");
                            }}},
      .points = [](const SweepScope& sc) {
        const ModelConfig& m = *sc.model;
        std::vector<Point> pts;
        if (sc.impls(fused_add_rmsnorm_request(1, m.hidden, sc.dtype), false).empty()) return pts;
        for (auto B : (*sc.axes)["batch"])
          pts.push_back(make_point("decode", m.name, "", m.name, fused_add_rmsnorm_request(B, m.hidden, sc.dtype),
                                   {{"batch", B, "batch"}}, false));
        return pts;
      }});
}
