#pragma once
// MLA decode attention's host plan: what the kernels take, the split-KV choice
// and its workspace, and a request's plan (its limits and the kernels'
// dimensions, built once before anything is allocated). Host code; the kernels
// are latent_attention.cuh.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cuda/cuda_op.hpp"
#include "cuda/latent_attention.hpp"
#include "cuda/split_kv.hpp"
#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

// What is wrong and what is supported, or nothing.
std::optional<std::string> latent_attention_unsupported(DType dtype, long long H, long long R, long long P);

// Most splits of one decode.
constexpr int kMaxLatentSplits = 1024;

// Fewest tokens a split takes when the backend chooses: max(256, 16 * H), so the
// split's partial results (H x (512 + 2) fp32, written and read back) stay
// under a quarter of the latent bytes it reads.
int latent_min_chunk(int H);

// Split-KV plan: `requested` splits (0: none when B x head tiles CTAs fill at
// least 3/4 of a wave of the GPU (sm_count x ctas_per_sm), else the fewest
// splits whose CTAs fill their waves best, each chunk at least
// latent_min_chunk(H) tokens), chunks a multiple of 32 tokens (the kernel's
// tile); the workspace holds B*H*splits*(512 + 2) floats.
SplitKvPlan plan_latent_splits(int B, int H, int L, std::uint64_t requested, int sm_count, int ctas_per_sm);

// An MLA decode attention request's plan (kinds latent_attention and its
// paged kind): its limits, and when it can run, the kernels' dimensions and the
// split plan.
struct LatentAttentionPlan : OpPlan {
  bool paged = false;
  int B = 0, H = 0, L = 0;
  float scale_log2 = 0;  // the softmax scale times log2(e)
  SplitKvPlan split;
};
std::shared_ptr<const LatentAttentionPlan> plan_latent_attention(const OpRequest& r, const Context& ctx);

}  // namespace phasebench::cuda
