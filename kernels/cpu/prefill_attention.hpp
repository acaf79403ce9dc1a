#pragma once
// The CPU backend's prefill attention kernel (prefill_attention.cpp): multi-threaded
// (OpenMP) loops written to stream memory; layouts as the CUDA kernels'
// (docs/design.md, kernels/backend.hpp).
#include <cstdint>

namespace phasebench::cpu {

// Prompt rows per query block of prefill_attention (also its key block).
inline constexpr std::uint64_t kPrefillQueryRows = 32;

// Causal prefill attention over a prompt of S tokens, fp32. q, out: [B, S, Hq, D];
// k, v: [B, S, Hkv, D]; query head j attends to KV head j / (Hq / Hkv).
struct PrefillAttentionArgs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  std::uint64_t B = 0, S = 0, Hq = 0, Hkv = 0, D = 0;
};
void prefill_attention(const PrefillAttentionArgs& a);

}  // namespace phasebench::cpu
