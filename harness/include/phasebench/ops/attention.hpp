#pragma once
// The attention operations (harness/src/ops/decode_attention.cpp and
// prefill_attention.cpp): decode attention over a contiguous or paged KV cache,
// and causal prefill attention.
#include <cstdint>

#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kDecodeAttention = "decode_attention";
inline constexpr const char* kDecodeAttentionPaged = "decode_attention_paged";
inline constexpr const char* kPrefillAttention = "prefill_attention";

// splits: 0 = the backend chooses the split-KV plan. kv_fp8: the K and V caches
// hold fp8 e4m3 with an fp32 scale per KV head for each (kv_scale_bytes); q and
// the output stay `dtype` (the request's param "kv_fp8" = 1).
OpRequest decode_attention_request(const AttentionShape& s, DType dtype, bool paged, std::uint64_t page_size = 16,
                                   std::uint64_t splits = 0, std::uint64_t seed = 0x5eed, bool kv_fp8 = false);
// The KV cache's element type of a decode attention request: fp8 or its dtype.
DType decode_attention_kv_dtype(const OpRequest& r);
OpRequest prefill_attention_request(const PrefillAttentionShape& s, DType dtype, Impl impl, std::uint64_t seed = 0x5eed);

}  // namespace phasebench
