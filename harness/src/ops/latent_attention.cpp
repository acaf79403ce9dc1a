// MLA decode attention, absorbed form (ops/latent_attention.hpp; DESIGN:
// 2*B*H*L*(2R + P) FLOPs; c*B*L*(R + P) cache bytes, a*B*H*(R + P) query and
// a*B*H*R output bytes; paged: + 4 bytes per page per sequence), over a
// contiguous latent cache [B, L, R+P] or a paged one (pages [pages, page, R+P]
// plus an int32 block table per sequence). One sweep group, latent_attention:
// for each MLA model (the MLA models of --model, else DeepSeek-V2-Lite and V3
// on a GPU, V2-Lite on a CPU; H from the config: 16 and 128), batch x context,
// contiguous and paged (page size 64, as FlashMLA).
#include <cmath>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/latent_attention.hpp"
#include "phasebench/step_time.hpp"

namespace phasebench {

OpRequest latent_attention_request(const LatentAttentionShape& s, DType dtype, bool paged, std::uint64_t qk_dim,
                                   std::uint64_t page_size, std::uint64_t splits, std::uint64_t seed) {
  if (qk_dim == 0) throw InputError("MLA decode attention: qk_dim (qk_nope + qk_rope) must be positive");
  if (paged && page_size == 0) throw InputError("MLA decode attention: the page size must be a positive integer");
  OpRequest r;
  r.kind = paged ? kLatentAttentionPaged : kLatentAttention;
  r.phase = Phase::decode;
  r.dtype = dtype;
  r.impl = Impl::own;
  r.shape = s.shape();
  r.options = OpOptions(LatentAttentionOptions{paged ? page_size : 0, splits, qk_dim});
  r.seed = seed;
  return r;
}

float latent_attention_scale(const OpRequest& r) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(r.options.as<LatentAttentionOptions>().qk_dim)));
}

namespace {

OpCost contiguous_cost(const OpRequest& r) {
  const auto e = element_bytes(r.dtype);
  return latent_attention_cost(LatentAttentionShape::of(r.shape), e, e);
}

OpCost paged_cost(const OpRequest& r) {
  const auto e = element_bytes(r.dtype);
  return latent_attention_paged_cost(LatentAttentionShape::of(r.shape), e, e, r.options.as<LatentAttentionOptions>().page_size);
}

// The page pool holds whole pages: the last page of each sequence is allocated in full.
std::uint64_t paged_footprint(const OpRequest& r) {
  const auto s = LatentAttentionShape::of(r.shape);
  const auto P = r.options.as<LatentAttentionOptions>().page_size, c = element_bytes(r.dtype);
  const auto pages = mul(s.B, pages_per_sequence(s.L, P), "pages");
  const auto cost = paged_cost(r);
  return add(mul({c, pages, P, add(s.R, s.P)}, "paged latent cache bytes"),
             add(cost.bytes.activations + cost.bytes.writes, mul(4, pages)));
}

}  // namespace

namespace {

// Serving (step_time.hpp): absorbed MLA decode, on the curve of heads, latent
// widths and cache type, along batch and context (contiguous and paged alike).
std::string latent_curve(std::uint64_t H, std::uint64_t R, std::uint64_t P, const std::string& kv) {
  return "latent_attention/" + std::to_string(H) + "/" + std::to_string(R) + "/" + std::to_string(P) + "/" + kv;
}

std::optional<StepMatch> latent_point(const nlohmann::json& p) {
  const auto B = point_size(p, "B"), H = point_size(p, "H"), L = point_size(p, "L"), R = point_size(p, "R"),
             P = point_size(p, "P");
  if (!B || !H || !L || !R || !P) return std::nullopt;
  return StepMatch{latent_curve(*H, *R, *P, point_dtype(p)), {static_cast<double>(*B), static_cast<double>(*L)}};
}

std::optional<StepMatch> latent_step_op(const StepOpView& v) {
  const auto& s = v.op.shape;
  if (v.op.kind != "decode_attention" || !s.has("R")) return std::nullopt;
  return StepMatch{latent_curve(s["H"], s["R"], s["P"], std::string(to_string(v.kv_dtype))),
                   {static_cast<double>(s["B"]), static_cast<double>(s["L"])}};
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(latent_attention) {
  using namespace phasebench;
  OpDecl contiguous_decl{kLatentAttention, {"B", "H", "L", "R", "P"}, contiguous_cost,
                    [](const OpRequest& r) { return contiguous_cost(r).bytes.total(); }, {},
                    {"decode_latent_attention"}, {Impl::flashinfer}};  // FlashInfer's MLA on CUDA
  OpDecl paged_decl{kLatentAttentionPaged, {"B", "H", "L", "R", "P"}, paged_cost, paged_footprint, {},
               {"decode_latent_attention_paged"}, {Impl::flashinfer}};
  for (OpDecl* d : {&contiguous_decl, &paged_decl}) {
    d->match_point = latent_point;
    d->match_step_op = latent_step_op;
    registry.declare(std::move(*d));
  }
  // GPU: small-batch short-context points (split-KV) up to >= 256 MiB of latent
  // cache (bf16: B*L*1152 bytes; 64 x 8192 is 604 MB). CPU: four small points.
  registry.group(SweepGroup{
      .name = "latent_attention",
      .help = "MLA decode attention (DeepSeek, absorbed form) for each MLA model (with --model: those among them; "
              "else DeepSeek-V2-Lite and V3 on a GPU, V2-Lite on a CPU) over batch x context, contiguous and paged",
      .order = 35,
      .takes = [](const ModelConfig& m) { return m.uses_mla(); },
      .takes_what = "multi-head latent attention models",
      .gpu_models = {"deepseek-v2-lite", "deepseek-v3"},  // 16 and 128 heads
      .cpu_models = {"deepseek-v2-lite"},
      .axes = {AxisDecl{.name = "batch",
                        .help = "batch sizes",
                        .gpu_default = {1, 8, 64, 256},
                        .cpu_default = {1, 4},
                        .alias = "--mla-batches"},
               AxisDecl{.name = "context",
                        .help = "context lengths (tokens in the latent cache)",
                        .gpu_default = {1024, 8192},
                        .cpu_default = {2048},
                        .alias = "--mla-contexts"},
               AxisDecl{.name = "page_size",
                        .help = "tokens per page of the paged latent cache (FlashMLA uses 64)",
                        .single = true,
                        .gpu_default = {64},
                        .cpu_default = {64},
                        .check =
                            [](const std::vector<std::uint64_t>& v, const std::string& what) {
                              for (auto p : v)
                                if (p == 0) throw InputError(what + ": the page size must be a positive integer");
                            },
                        .alias = "--mla-page-size"}},
      .points = [](const SweepScope& sc) {
        std::vector<Point> pts;
        const auto P = sc.axes->one("page_size");
        {
          const ModelConfig& m = *sc.model;
          const auto& a = m.mla;
          const auto qk = a.qk_nope + a.qk_rope;
          for (const bool paged : {false, true}) {
            // Ours, then FlashInfer's MLA beside it where the backend has it (named impl:flashinfer).
            const auto impls =
                sc.impls(latent_attention_request({1, m.heads, 1, a.kv_lora_rank, a.qk_rope}, sc.dtype, paged, qk, P),
                         false);
            for (auto B : (*sc.axes)["batch"])
              for (auto L : (*sc.axes)["context"]) {
                auto r = latent_attention_request({B, m.heads, L, a.kv_lora_rank, a.qk_rope}, sc.dtype, paged, qk, P);
                std::vector<PointArg> args{{"batch", B, "batch"}, {"context", L, "context"}};
                if (paged) args.push_back({"page_size", P, "page"});
                for (Impl impl : impls) {
                  r.impl = impl;
                  pts.push_back(make_point("decode", m.name, "", m.name, r, args, impl != Impl::own));
                }
              }
          }
        }
        return pts;
      }});
}
