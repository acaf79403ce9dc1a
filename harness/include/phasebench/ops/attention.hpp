#pragma once
// The attention operations (harness/src/ops/decode_attention.cpp and
// prefill_attention.cpp): decode attention over a contiguous or paged KV cache,
// and causal prefill attention.
#include <cstdint>
#include <string>
#include <vector>

#include "phasebench/context_dist.hpp"

#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kDecodeAttention = "decode_attention";
inline constexpr const char* kDecodeAttentionPaged = "decode_attention_paged";
inline constexpr const char* kPrefillAttention = "prefill_attention";

// The models the attention groups run for: grouped-query attention, every model
// but the MLA ones (whose attention is latent_attention's; their projections
// still run); with no --model given on a GPU, Llama-3.1-8B and 70B (4 and 8
// query heads per KV head).
bool grouped_query_attention(const ModelConfig& m);
inline constexpr const char* kGroupedQueryAttentionModels = "grouped-query attention models (all but MLA)";
std::vector<std::string> attention_gpu_models();

// splits: 0 = the backend chooses the split-KV plan. kv_fp8: the K and V caches
// hold fp8 e4m3 with an fp32 scale per KV head for each (kv_scale_bytes); q and
// the output stay `dtype` (the request's param "kv_fp8" = 1).
OpRequest decode_attention_request(const AttentionShape& s, DType dtype, bool paged, std::uint64_t page_size = 16,
                                   std::uint64_t splits = 0, std::uint64_t seed = 0x5eed, bool kv_fp8 = false);
// The KV cache's element type of a decode attention request: fp8 or its dtype.
DType decode_attention_kv_dtype(const OpRequest& r);

// Multi-token and ragged decode steps (docs/design.md): S new tokens per
// sequence, causal within them (params new_tokens), over contexts drawn from
// `dist` around the shape's L (params context_dist, context_dist_ppm; the draw
// comes from the request's seed). Queries and outputs are [B, S, Hq, D]; a
// contiguous cache is [B, Hkv, max L_b, D], a paged one has max_b
// pages_per_sequence(L_b) block-table entries per sequence. InputError when S is
// 0 or the drawn contexts cannot hold S tokens.
void set_decode_steps(OpRequest& r, std::uint64_t S, const ContextDist& dist);
std::uint64_t decode_attention_new_tokens(const OpRequest& r);  // S, 1 when not set
ContextDist decode_attention_context_dist(const OpRequest& r);
// Each sequence's context (B of them, all L when fixed), and the largest.
std::vector<std::uint64_t> decode_attention_lengths(const OpRequest& r);
std::uint64_t decode_attention_max_length(const OpRequest& r);
// The step's queries for the cost formulas (lengths empty when fixed).
DecodeQueries decode_attention_queries(const OpRequest& r);
OpRequest prefill_attention_request(const PrefillAttentionShape& s, DType dtype, Impl impl, std::uint64_t seed = 0x5eed);

}  // namespace phasebench
