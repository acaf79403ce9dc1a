#pragma once
// Prefill attention: causal self-attention over S prompt tokens (no cached prefix).
//
//   q [B, S, Hq, D], k and v [B, S, Hkv, D], out [B, S, Hq, D]; query head hq reads
//   kv head hq / (Hq / Hkv); scale = 1/sqrt(D); bf16/fp16 in and out, fp32 accumulation.
//
// Two implementations:
//   - flash (Impl::own): a tiled FlashAttention-2 style kernel, scores on chip only;
//   - blas (Impl::blas): the reference row, S = Q K^T through cuBLAS strided-batched
//     GEMMs into a materialised fp32 [B, Hq, S, S] buffer, a causal softmax kernel
//     that writes P (16-bit) over that buffer, then O = P V through cuBLAS again.
// Here the params and the launchers; the kernels are prefill_attention.cuh, the
// plan prefill_attention_plan.hpp, the operation prefill_attention.cu.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

struct PrefillAttentionParams {
  DType dtype = DType::bf16;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  int B = 0, S = 0, Hq = 0, Hkv = 0, D = 0;
};

// The params of causal attention over [B, S, Hq, D] queries and [B, S, Hkv, D]
// keys and values (the whole layer's prefill step).
PrefillAttentionParams prefill_attention_params(DType t, const void* q, const void* k, const void* v, void* out, int B,
                                                int S, int Hq, int Hkv, int D);

// Flash kernel (mma.sync, FlashAttention-2 style; head_dim 64, 128 or 256): one CTA
// per (128-query tile, query head, batch): 4 warps of 32 query rows at head_dim 128,
// 8 warps of 16 at 64 and 256.
void launch_prefill_flash(const PrefillAttentionParams& p, cudaStream_t stream);
// Dynamic shared memory of the flash kernel for head_dim D (bytes).
std::size_t prefill_flash_smem_bytes(int D);

// cuBLAS reference path: two pointer-array batched GEMMs over B*Hq (scores, then
// P V) around the causal softmax, so the host enqueues three calls whatever the
// head count. `scores` holds prefill_blas_scores_bytes bytes, `pointers` the
// device copy of prefill_blas_pointers(p, scores) (prefill_attention_plan.hpp).
// `cublas` must already be bound to `stream`.
void launch_prefill_blas(const PrefillAttentionParams& p, float* scores, const void* const* pointers,
                         cublasHandle_t cublas, cudaStream_t stream);

}  // namespace phasebench::cuda
