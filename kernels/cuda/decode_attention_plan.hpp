#pragma once
// Decode attention's host plan: what the kernels take, how many query rows a
// CTA computes, the split-KV choice and its workspace, and a request's plan
// (its limits and the kernels' params, built once before anything is
// allocated). Host code; the kernels are decode_attention.cuh.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_op.hpp"
#include "cuda/decode_attention.hpp"
#include "cuda/split_kv.hpp"
#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

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

// Split-KV heuristic, when B*Hkv*head_chunks CTAs do not fill one wave
// (sm_count * ctas_per_sm resident CTAs): the split count, up to two waves and
// chunks of at least kMinDecodeChunk tokens (and of the page), that minimises
// waves x (chunk + kSplitCostTokens), so the grid sits just under a whole number
// of waves. Chunk lengths are a multiple of `align` tokens (the page size for
// paged caches). Returns >= 1.
constexpr int kMinDecodeChunk = 64;
constexpr int kSplitCostTokens = 32;
int choose_decode_splits(int B, int Hkv, int head_chunks, int L, int align, int sm_count, int ctas_per_sm);

// The split-KV plan of one decode on a device of `sm_count` SMs: `requested`
// splits (0: choose_decode_splits), at most one per token, each chunk a multiple
// of the page size (paged: page_size > 0) or of 64 tokens; and its workspace,
// B*S*Hq*splits*(D+1) floats. The decode attention benchmark and the whole layer
// plan alike. L: the longest context; S: new tokens per sequence.
SplitKvPlan plan_decode_splits(DType dtype, int B, int Hq, int Hkv, int L, int D, int page_size,
                               std::uint64_t requested, int sm_count, bool kv_fp8 = false, int S = 1);

// A decode attention request's plan (kinds decode_attention, decode_attention_paged):
// its limits, and when it can run, the kernels' params (every pointer null, for
// the op to set), the split plan and the ragged contexts.
struct DecodeAttentionPlan : OpPlan {
  bool paged = false;
  DType kv_dtype = DType::bf16;  // the cache's elements: the request's dtype, or fp8
  DecodeAttentionParams params;
  SplitKvPlan split;
  std::vector<int> lengths;      // each sequence's context when ragged, else empty
};
std::shared_ptr<const DecodeAttentionPlan> plan_decode_attention(const OpRequest& r, const Context& ctx);

}  // namespace phasebench::cuda
