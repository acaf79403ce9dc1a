#pragma once
// Causal prefill attention (harness/src/ops/prefill_attention.cpp): S prompt
// tokens per sequence attend to themselves, no cached prefix; our flash kernel
// and the vendor path that materialises the scores.
#include <cstdint>

#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kPrefillAttention = "prefill_attention";

OpRequest prefill_attention_request(const PrefillAttentionShape& s, DType dtype, Impl impl, std::uint64_t seed = 0x5eed);

}  // namespace phasebench
