#pragma once
// The reference of decode attention (ops/decode_attention.hpp): one query head over
// its context, and the per-head scales of an fp8 KV cache.
#include <cstddef>
#include <functional>
#include <vector>

namespace phasebench::reference {

// One query head of decode attention: out[D] = softmax(q.K^T * scale) V over
// L keys; key(l) and value(l) return pointers to the D floats of token l.
void decode_attention_head(const float* q, std::size_t L, std::size_t D, float scale,
                           const std::function<const float*(std::size_t)>& key,
                           const std::function<const float*(std::size_t)>& value, float* out);

// The per-KV-head scales of an fp8 KV cache in the benchmarks and tests: K's for
// heads 0..Hkv-1, then V's (2*Hkv floats; a value is e4m3 x its head's scale).
// Distinct, and mostly not 1, so a kernel that drops or swaps them fails.
std::vector<float> kv_head_scales(std::size_t Hkv);

}  // namespace phasebench::reference
