#pragma once
// MLA decode attention on CUDA (ops/latent_attention.hpp), absorbed form:
// tensor cores (mma.sync m16n8k16, fp32 accumulate) with 16 query heads as the
// M side, the latent cache streamed once per head tile, online softmax,
// split-KV with a reduction, contiguous or paged. Supported: kv_lora_rank 512
// with qk_rope_head_dim 64 (DeepSeek-V2/V3), bf16 or fp16, any head count (the
// last tile of 16 heads is masked), any page size.
#include <cstdint>
#include <optional>
#include <string>

#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

// What is wrong and what is supported, or nothing.
std::optional<std::string> latent_attention_unsupported(DType dtype, long long H, long long R, long long P);

// Most splits of one decode.
constexpr int kMaxLatentSplits = 1024;

// Split-KV plan: `requested` splits (0: none when B x head tiles CTAs fill at
// least 3/4 of a wave of the GPU (sm_count x ctas_per_sm), else the fewest
// splits whose CTAs fill their waves best, each chunk at least
// latent_min_chunk(H) tokens), chunks a multiple of 32 tokens (the kernel's tile).
struct LatentSplitPlan {
  int splits = 1;
  int chunk = 1;  // tokens per split
  std::size_t workspace_floats = 0;
};
// Fewest tokens a split takes when the backend chooses: max(256, 16 * H), so the
// split's partial results (H x (512 + 2) fp32, written and read back) stay
// under a quarter of the latent bytes it reads.
int latent_min_chunk(int H);
LatentSplitPlan plan_latent_splits(int B, int H, int L, std::uint64_t requested, int sm_count, int ctas_per_sm);
// Resident CTAs per SM of the kernel (occupancy API).
int latent_attention_ctas_per_sm(DType dtype, bool paged);

}  // namespace phasebench::cuda
