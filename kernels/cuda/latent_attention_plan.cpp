// MLA decode attention's host plan (latent_attention_plan.hpp): the kernels'
// limits, the split-KV heuristic, and a request's plan.
#include "cuda/latent_attention_plan.hpp"

#include <algorithm>

#include "phasebench/ops/latent_attention.hpp"

namespace phasebench::cuda {

std::optional<std::string> latent_attention_unsupported(DType dtype, long long H, long long R, long long P) {
  if (dtype != DType::bf16 && dtype != DType::fp16)
    return "CUDA MLA decode attention takes bf16 or fp16, not " + std::string(to_string(dtype));
  if (R != kLatentRank || P != kLatentRopeDim)
    return "CUDA MLA decode attention supports kv_lora_rank 512 with qk_rope_head_dim 64 (DeepSeek-V2/V3); got R=" +
           std::to_string(R) + " P=" + std::to_string(P);
  if (H < 1 || (H + kLatentHeadsPerCta - 1) / kLatentHeadsPerCta > 65535)
    return "CUDA MLA decode attention: heads must be 1 to 65535*16";
  return std::nullopt;
}

int latent_min_chunk(int H) { return std::max(256, 16 * H); }

SplitKvPlan plan_latent_splits(int B, int H, int L, std::uint64_t requested, int sm_count, int ctas_per_sm) {
  long long splits = 1;
  if (requested == 0) {
    const long long base = static_cast<long long>(B) * ((H + kLatentHeadsPerCta - 1) / kLatentHeadsPerCta);
    const long long wave = static_cast<long long>(std::max(sm_count, 1)) * std::max(ctas_per_sm, 1);
    // A batch that fills 3/4 of a wave already keeps the GPU busy: splitting it
    // would only add the partial results' traffic and a reduction. Otherwise the
    // fewest splits whose CTAs (all of the same work) fill their waves within 2%
    // of the best:
    // 576 CTAs on 264 slots run in 3 waves, the last 18% full, where 512 run in
    // two full ones.
    if (4 * base < 3 * wave) {
      const long long most = std::min<long long>(std::max(1, L / latent_min_chunk(H)), kMaxLatentSplits);
      auto filled = [&](long long s) {
        const long long ctas = base * s;
        return static_cast<double>(ctas) / static_cast<double>((ctas + wave - 1) / wave * wave);
      };
      double best = 0;
      for (long long s = 1; s <= most; ++s) best = std::max(best, filled(s));
      while (filled(splits) < 0.98 * best) ++splits;  // the fewest within 2% of the best
    }
  } else {
    splits = requested_splits(requested, L, kMaxLatentSplits);
  }
  // Chunks of whole tiles (except the last); a partial of the 512 output columns,
  // the running max and the running sum per (sequence, head).
  return plan_split_kv(L, splits, kLatentTileTokens, static_cast<std::size_t>(B) * H,
                       static_cast<std::size_t>(kLatentRank) + 2);
}

namespace {

std::optional<std::string> request_unsupported(const OpRequest& r, const Context& ctx) {
  const auto s = LatentAttentionShape::of(r.shape);
  const auto& o = r.options.as<LatentAttentionOptions>();
  if (auto why = shared_memory_unsupported("MLA decode attention", latent_attention_smem_bytes(), ctx)) return why;
  if (auto why = latent_attention_unsupported(r.dtype, static_cast<long long>(s.H), static_cast<long long>(s.R),
                                              static_cast<long long>(s.P)))
    return why;
  return split_kv_request_unsupported("MLA decode attention", s.B, s.L, o.splits, kMaxLatentSplits,
                                      r.kind == kLatentAttentionPaged ? o.page_size : 0);
}

}  // namespace

std::shared_ptr<const LatentAttentionPlan> plan_latent_attention(const OpRequest& r, const Context& ctx) {
  return make_plan<LatentAttentionPlan>(request_unsupported(r, ctx), [&](LatentAttentionPlan& plan) {
    const auto s = LatentAttentionShape::of(r.shape);
    plan.paged = r.kind == kLatentAttentionPaged;
    // Every dimension fits in int: the check's 32-bit indexing.
    plan.B = static_cast<int>(s.B);
    plan.H = static_cast<int>(s.H);
    plan.L = static_cast<int>(s.L);
    plan.scale_log2 = static_cast<float>(1.4426950408889634 * latent_attention_scale(r));
    plan.split = plan_latent_splits(plan.B, plan.H, plan.L, r.options.as<LatentAttentionOptions>().splits,
                                    ctx.sm_count,
                                    latent_attention_ctas_per_sm(r.dtype, plan.paged));
    plan.scratch_bytes = plan.split.workspace_floats * sizeof(float);
  });
}

}  // namespace phasebench::cuda
