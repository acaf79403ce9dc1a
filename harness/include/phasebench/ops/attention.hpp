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

// splits: 0 = the backend chooses the split-KV plan.
OpRequest decode_attention_request(const AttentionShape& s, DType dtype, bool paged, std::uint64_t page_size = 16,
                                   std::uint64_t splits = 0, std::uint64_t seed = 0x5eed);
OpRequest prefill_attention_request(const PrefillAttentionShape& s, DType dtype, Impl impl, std::uint64_t seed = 0x5eed);

}  // namespace phasebench
