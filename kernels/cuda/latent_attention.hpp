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
#include <cstdint>

#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

// The kernels' geometry: the latent rank and rope width they take, the query
// heads a CTA computes (the MMA's M) and the latent rows of a tile (a split's
// chunk is whole tiles).
inline constexpr int kLatentRank = 512;
inline constexpr int kLatentRopeDim = 64;
inline constexpr int kLatentHeadsPerCta = 16;
inline constexpr int kLatentTileTokens = 32;

// What the attention kernel takes (the launcher sizes its grid from B and H).
struct LatentParams {
  const std::uint16_t* q;      // [B, H, 576]
  std::uint16_t* out;          // [B, H, 512]
  const std::uint16_t* cache;  // [B, L, 576] or pages [pages, page_size, 576]
  const std::int32_t* block_table;  // paged: [B, pages_per_seq]
  float* part;                 // splits > 1: [B * H][splits][512 + 2]
  int H, L, page_size, pages_per_seq, chunk, splits;
  float scale_log2;            // softmax scale * log2(e)
};

// The attention kernel's dynamic shared memory per block (bytes).
std::size_t latent_attention_smem_bytes();
// Resident CTAs per SM of the kernel (occupancy API).
int latent_attention_ctas_per_sm(DType dtype, bool paged);

}  // namespace phasebench::cuda
