#pragma once
// Decode attention over a KV cache (one query token per sequence), contiguous
// or paged, with grouped-query heads and split-KV.
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
#include <optional>
#include <string>

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
  float* workspace = nullptr;         // decode_attention_workspace_floats(...) floats when splits > 1
  // An fp8 e4m3 cache: K and V hold e4m3 (8-byte vectors per lane instead of 16),
  // a value of KV head h is e4m3 x kv_scales[h] (K) or kv_scales[Hkv + h] (V);
  // the K scale joins the softmax scale, the V scale multiplies the output.
  bool kv_fp8 = false;
  const float* kv_scales = nullptr;   // device, [2 * Hkv], when kv_fp8
};

// Supported: D in {64, 128, 256}, Hq % Hkv == 0, bf16/fp16, page size a multiple of 16,
// S from 1 to 16 new tokens.
// What is wrong and what is supported, or nothing when supported.
std::optional<std::string> decode_attention_unsupported(DType dtype, long long Hq, long long Hkv, long long D, bool paged,
                                                        long long page_size, long long S = 1);

// Most splits of one decode (workspace and reduction size).
constexpr int kMaxDecodeSplits = 1024;

// Query rows computed per CTA for G = S * Hq/Hkv rows per KV head (1, 2, 4 or 8),
// and the number of row chunks per KV head.
int decode_heads_per_cta(int G);
int decode_head_chunks(int G);

// Dynamic shared memory per block of the kernel that would run G = S * Hq/Hkv
// rows per KV head: the tensor-core kernel's tiles for 8 rows per CTA, else 0.
std::size_t decode_attention_smem_bytes(int D, int G, bool kv_fp8);

// Resident CTAs per SM of the kernel that would run these parameters (occupancy API).
int decode_attention_ctas_per_sm(DType dtype, int D, int G, bool paged, bool kv_fp8 = false);

// Split-KV heuristic, when B*Hkv*head_chunks CTAs do not fill one wave
// (sm_count * ctas_per_sm resident CTAs): the split count, up to two waves and
// chunks of at least kMinDecodeChunk tokens (and of the page), that minimises
// waves x (chunk + kSplitCostTokens), so the grid sits just under a whole number
// of waves. Chunk lengths are a multiple of `align` tokens (the page size for
// paged caches). Returns >= 1.
constexpr int kMinDecodeChunk = 64;
constexpr int kSplitCostTokens = 32;
int choose_decode_splits(int B, int Hkv, int head_chunks, int L, int align, int sm_count, int ctas_per_sm);
// Tokens per split for `splits` chunks of L, a multiple of `align`.
int decode_split_chunk(int L, int splits, int align);

// fp32 workspace for the partial results of `splits` > 1: B*Hq*splits*(D+1) floats
// (B*S query tokens for B).
std::size_t decode_attention_workspace_floats(int B, int Hq, int D, int splits);

// The split-KV plan of one decode on a device of `sm_count` SMs: `requested`
// splits (0: choose_decode_splits), at most one per token, each chunk a multiple
// of the page size (paged: page_size > 0) or of 64 tokens; and its workspace.
// The decode attention benchmark and the whole layer plan alike.
struct DecodeSplitPlan {
  int splits = 1;
  int chunk = 1;  // tokens per split
  std::size_t workspace_floats = 0;
};
// L: the longest context; S: new tokens per sequence.
DecodeSplitPlan plan_decode_splits(DType dtype, int B, int Hq, int Hkv, int L, int D, int page_size,
                                   std::uint64_t requested, int sm_count, bool kv_fp8 = false, int S = 1);

// The params of a decode over contiguous [B, Hkv, L, D] caches of the same type as
// q, one new token per sequence, every context L, in `splits` chunks (workspace
// when > 1): what the decode attention op and the whole layer both start from
// (the op then sets a paged pool, the step's tokens, ragged contexts, an fp8 cache).
DecodeAttentionParams decode_attention_params(DType t, const void* q, void* out, const void* k, const void* v, int B,
                                              int Hq, int Hkv, int L, int D, int splits, float* workspace);

// Enqueue on `stream` (no synchronisation). `chunk` tokens per split
// (decode_split_chunk); p.splits == ceil(L / chunk).
void launch_decode_attention(const DecodeAttentionParams& p, int chunk, cudaStream_t stream);

}  // namespace phasebench::cuda
