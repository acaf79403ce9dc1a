#pragma once
// MLA decode attention on CUDA (ops/latent_attention.hpp), absorbed form:
// tensor cores (mma.sync m16n8k16, fp32 accumulate) with 16 query heads as the
// M side, the latent cache streamed once per head tile, online softmax,
// split-KV with a reduction, contiguous or paged. Supported: kv_lora_rank 512
// with qk_rope_head_dim 64 (DeepSeek-V2/V3), bf16 or fp16, any head count (the
// last tile of 16 heads is masked), any page size. The kernels are
// latent_attention.cuh, the plan latent_attention_plan.hpp, the operation
// latent_attention.cu; this is what the plan asks of the kernels.
#include <cstddef>

#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

// The kernels' geometry: the latent rank and rope width they take, the query
// heads a CTA computes (the MMA's M) and the latent rows of a tile (a split's
// chunk is whole tiles).
inline constexpr int kLatentRank = 512;
inline constexpr int kLatentRopeDim = 64;
inline constexpr int kLatentHeadsPerCta = 16;
inline constexpr int kLatentTileTokens = 32;

// The attention kernel's dynamic shared memory per block (bytes).
std::size_t latent_attention_smem_bytes();
// Resident CTAs per SM of the kernel (occupancy API).
int latent_attention_ctas_per_sm(DType dtype, bool paged);

}  // namespace phasebench::cuda
