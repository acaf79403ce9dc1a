#pragma once
// Decode attention (harness/src/ops/decode_attention.cpp): the step's queries
// over a contiguous or paged KV cache (kinds decode_attention and
// decode_attention_paged), one or several new tokens per sequence.
#include <cstdint>
#include <string>
#include <vector>

#include "phasebench/context_dist.hpp"

#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kDecodeAttention = "decode_attention";
inline constexpr const char* kDecodeAttentionPaged = "decode_attention_paged";

// A decode attention request's options (OpRequest::options).
struct DecodeAttentionOptions {
  std::uint64_t page_size = 0;  // tokens per page (the paged kind)
  std::uint64_t splits = 0;     // split-KV chunks per sequence; 0: the backend plans them
  // The K and V caches hold fp8 e4m3 with an fp32 scale per KV head for each
  // (kv_scale_bytes); q and the output stay the request's dtype.
  bool kv_fp8 = false;
  std::uint64_t new_tokens = 1;  // S: new tokens per sequence in the step (causal among them)
  ContextDist context_dist{};    // how each sequence's context is drawn around the shape's L
};

// splits: 0 = the backend chooses the split-KV plan; kv_fp8: DecodeAttentionOptions.
OpRequest decode_attention_request(const AttentionShape& s, DType dtype, bool paged, std::uint64_t page_size = 16,
                                   std::uint64_t splits = 0, std::uint64_t seed = 0x5eed, bool kv_fp8 = false);
// The KV cache's element type of a decode attention request: fp8 or its dtype.
DType decode_attention_kv_dtype(const OpRequest& r);

// Multi-token and ragged decode steps (docs/design.md): S new tokens per
// sequence, causal within them, over contexts drawn from `dist` around the
// shape's L (the draw comes from the request's seed). Queries and outputs are [B, S, Hq, D]; a
// contiguous cache is [B, Hkv, max L_b, D], a paged one has max_b
// pages_per_sequence(L_b) block-table entries per sequence. InputError when S is
// 0 or the drawn contexts cannot hold S tokens.
void set_decode_steps(OpRequest& r, std::uint64_t S, const ContextDist& dist);
std::uint64_t decode_attention_new_tokens(const OpRequest& r);  // S, at least 1
// Each sequence's context (B of them, all L when fixed), and the largest.
std::vector<std::uint64_t> decode_attention_lengths(const OpRequest& r);
std::uint64_t decode_attention_max_length(const OpRequest& r);
// The step's queries for the cost formulas (lengths empty when fixed).
DecodeQueries decode_attention_queries(const OpRequest& r);

}  // namespace phasebench
