#pragma once
// Decode attention over a KV cache (one query token per sequence), contiguous
// or paged, with grouped-query heads and split-KV: the kernels' params and their
// launcher (the kernels are decode_attention.cuh, the plan decode_attention_plan.hpp,
// the operation decode_attention.cu).
//
// Layouts (shared with the CPU backend):
//   q, out        [B, Hq, D]   (bf16 or fp16; the cache the same type, or fp8 e4m3 with per-head scales)
//   contiguous K, V caches  [B, Hkv, L, D]   (two buffers)
//   paged K, V page pools   [num_pages, Hkv, P, D], block table int32 [B, pages_per_seq]
// Query head hq reads KV head hq / (Hq / Hkv); scale = 1/sqrt(D); fp32 accumulation,
// online softmax. One CTA per (batch, kv head, head chunk, split): all the query
// heads of a group (up to 8 per CTA) are computed by the CTA that streams their
// K/V, so each K/V byte is read once for the whole group.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

struct DecodeAttentionParams {
  DType dtype = DType::bf16;          // bf16 or fp16 (q, out, K, V alike)
  const void* q = nullptr;            // [B, S, Hq, D]
  void* out = nullptr;                // [B, S, Hq, D]
  const void* k = nullptr;            // contiguous cache or page pool
  const void* v = nullptr;
  const std::int32_t* block_table = nullptr;  // paged only: [B, pages_per_seq]; nullptr = contiguous
  int B = 0, Hq = 0, Hkv = 0, L = 0, D = 0;  // L: the longest context (a contiguous cache's stride)
  // S new tokens per sequence, causal within them: query s of sequence b sees
  // its first len_b - S + 1 + s tokens. The S*G query rows of a KV head are
  // computed together, so each K/V row is read once for all of them.
  int S = 1;
  const int* lengths = nullptr;       // device, [B]: each sequence's context (ragged, each in [S, L]); nullptr: all L
  int page_size = 0;                  // paged only
  int pages_per_seq = 0;              // paged only
  int splits = 1;                     // chunks of the context (>= 1); > 1 needs the workspace
  float* workspace = nullptr;         // the split plan's workspace_floats floats when splits > 1
  // An fp8 e4m3 cache: K and V hold e4m3 (8-byte vectors per lane instead of 16),
  // a value of KV head h is e4m3 x kv_scales[h] (K) or kv_scales[Hkv + h] (V);
  // the K scale joins the softmax scale, the V scale multiplies the output.
  bool kv_fp8 = false;
  const float* kv_scales = nullptr;   // device, [2 * Hkv], when kv_fp8
};

// The params of a decode over contiguous [B, Hkv, L, D] caches of the same type as
// q, one new token per sequence, every context L, in `splits` chunks (workspace
// when > 1): what the decode attention op and the whole layer both start from
// (the op then sets a paged pool, the step's tokens, ragged contexts, an fp8 cache).
DecodeAttentionParams decode_attention_params(DType t, const void* q, void* out, const void* k, const void* v, int B,
                                              int Hq, int Hkv, int L, int D, int splits, float* workspace);

// Enqueue on `stream` (no synchronisation). `chunk` tokens per split
// (plan_decode_splits); p.splits == ceil(L / chunk).
void launch_decode_attention(const DecodeAttentionParams& p, int chunk, cudaStream_t stream);

// What the plan asks of the kernels that would run G = S * Hq/Hkv query rows per KV head:
// the tensor-core kernel's dynamic shared memory per block for 8 rows per CTA (else 0),
std::size_t decode_attention_smem_bytes(int D, int G, bool kv_fp8);
// and their resident CTAs per SM (occupancy API).
int decode_attention_ctas_per_sm(DType dtype, int D, int G, bool paged, bool kv_fp8 = false);

}  // namespace phasebench::cuda
