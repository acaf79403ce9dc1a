#pragma once
// What the cuDNN attention rows (prefill_attention_cudnn.cpp, decode_attention_cudnn.cpp)
// work out without cuDNN or a device: the dims and strides their SDPA graphs give
// cuDNN for our buffers, the block table as cuDNN reads it, what they refuse, and the
// version text. Header-only and free of CUDA, so tests/unit checks it in every build.
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

// A tensor as cuDNN's graph takes it: dims and strides (in elements) in cuDNN's
// SDPA order (batch, head, sequence, head_dim) for Q, K, V and O; the page pool
// (block, head, token in block, head_dim); the block table (batch, 1, page, 1).
struct CudnnTensorLayout {
  std::array<std::int64_t, 4> dim{}, stride{};
};

// Our [B, S, H, D] buffers (prefill q, k, v, out; decode q and out, S = 1): token
// rows of all heads together, so a head's next token is H*D elements on.
inline constexpr CudnnTensorLayout cudnn_bshd(std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D) {
  return {{B, H, S, D}, {S * H * D, D, H * D, 1}};
}
// A contiguous KV cache [B, H, L, D] (decode_attention): cuDNN's own BHSD order.
inline constexpr CudnnTensorLayout cudnn_bhsd(std::int64_t B, std::int64_t H, std::int64_t L, std::int64_t D) {
  return {{B, H, L, D}, {H * L * D, L * D, D, 1}};
}
// Our page pool [pages, Hkv, P, D] is cuDNN's paged container [num_blocks, H, block_size, D], as it is.
inline constexpr CudnnTensorLayout cudnn_page_pool(std::int64_t pages, std::int64_t Hkv, std::int64_t P, std::int64_t D) {
  return cudnn_bhsd(pages, Hkv, P, D);
}
// Our int32 block table [B, pages_per_seq], row-major, is cuDNN's page table
// [B, 1, pages_per_seq, 1]: the same bytes, read in place (no conversion).
inline constexpr CudnnTensorLayout cudnn_block_table(std::int64_t B, std::int64_t pages_per_seq) {
  return {{B, 1, pages_per_seq, 1}, {pages_per_seq, pages_per_seq, 1, 1}};
}
// The per-sequence lengths of the padding mask: int32 [B, 1, 1, 1].
inline constexpr CudnnTensorLayout cudnn_seq_lens(std::int64_t B) { return {{B, 1, 1, 1}, {1, 1, 1, 1}}; }

// The element offset of index i (in the layout's dim order).
inline constexpr std::int64_t cudnn_offset(const CudnnTensorLayout& t, const std::array<std::int64_t, 4>& i) {
  return i[0] * t.stride[0] + i[1] * t.stride[1] + i[2] * t.stride[2] + i[3] * t.stride[3];
}

// cudnnGetVersion()'s number as text: 91900 -> "9.19.0" (cuDNN 9: major*10000 + minor*100 + patch).
inline std::string cudnn_version_text(std::size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

// What the cuDNN rows refuse before asking cuDNN; cuDNN's own refusals (head dims,
// sizes, its graph's validation and support checks) come from building the graph.
// The device: cuDNN's fused flash-attention SDPA needs sm_80 or newer.
inline std::optional<std::string> cudnn_sdpa_device_refusal(int cc_major, int cc_minor) {
  if (cc_major >= 8) return std::nullopt;
  return "cuDNN SDPA needs compute capability 8.0 or newer (its fused flash-attention engines); this device is " +
         std::to_string(cc_major) + "." + std::to_string(cc_minor);
}
// The element type: 16-bit in and out (fp32 softmax and accumulation inside).
inline std::optional<std::string> cudnn_sdpa_dtype_refusal(DType t) {
  if (t == DType::bf16 || t == DType::fp16) return std::nullopt;
  return "cuDNN SDPA row: dtype " + std::string(to_string(t)) + " is not supported; use bf16 or fp16";
}
// Decode attention's options that the cuDNN row does not implement: an fp8 cache
// (cuDNN's fp8 SDPA takes fp8 Q and per-tensor descales, not our 16-bit queries
// over a per-head-scaled cache), several new tokens per sequence, and a split-KV
// count of ours (cuDNN splits as its engine decides). Ragged contexts it takes
// (the padding mask's per-sequence lengths).
inline std::optional<std::string> cudnn_decode_refusal(bool kv_fp8, std::uint64_t new_tokens, std::uint64_t splits) {
  if (kv_fp8)
    return std::string("cuDNN decode attention row: the fp8 cache is not implemented (cuDNN's fp8 SDPA wants fp8 "
                       "queries and per-tensor scales; ours are 16-bit queries over a cache scaled per KV head)");
  if (new_tokens != 1)
    return "cuDNN decode attention row: " + std::to_string(new_tokens) +
           " new tokens per sequence are not implemented (one new token only)";
  if (splits != 0)
    return "cuDNN decode attention row: a split-KV count (" + std::to_string(splits) +
           ") is ours to choose only; cuDNN's engine splits as it decides (leave splits at 0)";
  return std::nullopt;
}

}  // namespace phasebench::cuda

namespace phasebench::cuda::cudnn_layout_checks {
// Compile-time checks: element (b, s, h, d) of a [2, 3, 4, 8] BSHD buffer is
// ((b*3 + s)*4 + h)*8 + d, and cuDNN's (b, h, s, d) index reaches it.
static_assert(cudnn_offset(cudnn_bshd(2, 3, 4, 8), {1, 2, 1, 5}) == ((1 * 3 + 1) * 4 + 2) * 8 + 5);
// Page (block) 5, KV head 1, token 3 of a [6, 2, 16, 8] pool: ((5*2 + 1)*16 + 3)*8.
static_assert(cudnn_offset(cudnn_page_pool(6, 2, 16, 8), {5, 1, 3, 0}) == ((5 * 2 + 1) * 16 + 3) * 8);
// Entry (b, 0, i, 0) of the page table is entry b*pages_per_seq + i of our block table.
static_assert(cudnn_offset(cudnn_block_table(3, 7), {2, 0, 4, 0}) == 2 * 7 + 4);
}  // namespace phasebench::cuda::cudnn_layout_checks
