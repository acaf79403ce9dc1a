#pragma once
// The CPU backend's own kernels: multi-threaded (OpenMP) loops written to
// stream memory (contiguous, vectorisable inner loops, each input byte read
// once). Layouts are the same as the CUDA kernels' (docs/design.md, kernels/backend.hpp).
#include <cstdint>

#include "phasebench/dtype.hpp"

namespace phasebench::cpu {

// Largest batch (rows of X) the own GEMV handles in one pass over W.
inline constexpr std::uint64_t kMaxGemvBatch = 16;

// Y[M,N] = X[M,K] W^T for M <= kMaxGemvBatch; X, W, Y stored as `t` (fp32, bf16
// or fp16), fp32 accumulation. Every weight byte is read once per call.
void decode_gemv(const void* X, const void* W, void* Y, std::uint64_t M, std::uint64_t N, std::uint64_t K, DType t);

// The same with W weight-only int4 (ops/linear_int4.hpp's packed layout, groups
// of G = 32..256 along K), X and Y bf16, fp32 accumulation.
void decode_gemv_int4(const std::uint16_t* X, const std::uint8_t* q, const std::uint16_t* scales,
                      const std::uint8_t* zeros, std::uint16_t* Y, std::uint64_t M, std::uint64_t N, std::uint64_t K,
                      std::uint64_t G);

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
// Prompt rows per query block of prefill_attention (also its key block).
inline constexpr std::uint64_t kPrefillQueryRows = 32;

// KV append: new_k, new_v [B, S, Hkv, D] written to positions pos..pos+S-1.
// Contiguous cache [B, Hkv, capacity, D]; paged pools as above.
struct KvAppendArgs {
  const void* new_k = nullptr;
  const void* new_v = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const std::int32_t* block_table = nullptr;  // null: contiguous cache
  std::uint64_t B = 0, S = 0, Hkv = 0, D = 0, pos = 0, capacity = 0;
  std::uint64_t page_size = 0, pages_per_seq = 0;
  std::uint64_t element_bytes = 4;
};
void kv_append(const KvAppendArgs& a);

}  // namespace phasebench::cpu
