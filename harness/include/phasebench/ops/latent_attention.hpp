#pragma once
// MLA decode attention (DeepSeek-V2/V3, absorbed form; harness/src/ops/
// latent_attention.cpp): every one of H query heads attends over the same
// latent cache of one row of R + P elements per token (R = kv_lora_rank of
// compressed K/V, P = qk_rope_head_dim of shared rope key); the values are the
// first R elements of each row.
//
// Layouts (all backends):
//   q    [B, H, R + P]   (already absorbed: q_nope x W_UK, then q_rope)
//   out  [B, H, R]
//   contiguous latent cache [B, L, R + P]
//   paged: page pool [pages, page_size, R + P] plus an int32 block table
//          [B, pages_per_seq] (scattered_block_table, common/paged_kv.hpp)
// Softmax scale: 1/sqrt(qk_dim), qk_dim the model's qk_nope_head_dim +
// qk_rope_head_dim (192 for DeepSeek-V2-Lite and V3), the scale of the expanded
// attention the absorbed form reproduces. The YaRN mscale^2 factor DeepSeek's
// long-context configs multiply into it is left out (a constant factor on the
// logits, no change in cost). LatentAttentionOptions::qk_dim carries it.
#include <cstdint>

#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kLatentAttention = "latent_attention";
inline constexpr const char* kLatentAttentionPaged = "latent_attention_paged";

// A latent attention request's options (OpRequest::options).
struct LatentAttentionOptions {
  std::uint64_t page_size = 0;  // tokens per page (the paged kind)
  std::uint64_t splits = 0;     // split-KV chunks per sequence; 0: the backend plans them
  std::uint64_t qk_dim = 0;     // the softmax scale's dimension (qk_nope + qk_rope)
};

// splits: 0 = the backend chooses the split-KV plan.
OpRequest latent_attention_request(const LatentAttentionShape& s, DType dtype, bool paged, std::uint64_t qk_dim,
                                   std::uint64_t page_size = 64, std::uint64_t splits = 0,
                                   std::uint64_t seed = 0x5eed);
// The softmax scale of a request: 1/sqrt(qk_dim).
float latent_attention_scale(const OpRequest& r);

}  // namespace phasebench
