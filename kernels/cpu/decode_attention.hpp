#pragma once
// The CPU backend's decode attention kernel (decode_attention.cpp): multi-threaded
// (OpenMP) loops written to stream memory; layouts as the CUDA kernels'
// (docs/design.md, kernels/backend.hpp).
#include <cstdint>

#include "phasebench/dtype.hpp"

namespace phasebench::cpu {

// Decode attention, one query token per sequence. q, out: [B, Hq, D].
// Contiguous: k, v: [B, Hkv, L, D]. Paged: k, v pools [pages, Hkv, P, D] and
// block_table [B, pages_per_seq] (int32 page ids). Element type `t`.
struct DecodeAttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  const std::int32_t* block_table = nullptr;  // null: contiguous cache
  std::uint64_t B = 0, Hq = 0, Hkv = 0, L = 0, D = 0;
  std::uint64_t page_size = 0, pages_per_seq = 0;
  // S new tokens per sequence, causal within them: q and out are [B, S, Hq, D],
  // and query s of sequence b sees its first len_b - S + 1 + s tokens.
  std::uint64_t S = 1;
  // Each sequence's context (a ragged batch), at most L; null: all L. L is the
  // contiguous cache's stride ([B, Hkv, L, D]).
  const std::uint64_t* lengths = nullptr;
  DType t = DType::fp32;  // q and out; K and V too unless kv_fp8
  // An fp8 e4m3 cache (fp32 or bf16 q): K and V elements are e4m3, the value of
  // KV head h is e4m3 x k_scale[h] (v_scale[h]). The scales are applied outside
  // the inner loops: k_scale with the softmax scale, v_scale to the output.
  bool kv_fp8 = false;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
};
void decode_attention(const DecodeAttentionArgs& a);

}  // namespace phasebench::cpu
