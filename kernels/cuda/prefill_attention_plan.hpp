#pragma once
// Prefill attention's host plan: what the flash kernel and the cuBLAS path
// take, the cuBLAS path's score buffer and pointer arrays, and a request's
// plan (its limits and the params, built once before anything is allocated).
// Host code; the kernels are prefill_attention.cuh.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_op.hpp"
#include "cuda/prefill_attention.hpp"
#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

// What is wrong and what is supported, or nothing when the flash kernel / blas path takes the shape.
std::optional<std::string> prefill_attention_unsupported(DType dtype, long long Hq, long long Hkv, long long D, bool blas);

// Bytes of the fp32 score buffer of the blas path: B * Hq * S * S * 4.
std::uint64_t prefill_blas_scores_bytes(std::uint64_t B, std::uint64_t Hq, std::uint64_t S);
// Largest S the blas path's softmax kernel accepts (one score row in shared memory).
int prefill_blas_max_seq(int device);
// The blas path's per-(batch, query head) matrix pointers, in the order its two
// pointer-array GEMMs read them: QK^T's A (K), B (Q), C (scores), then P V's A
// (V), B (P), C (out), B*Hq each. Upload them once (they depend only on the
// buffers) and pass the device copy to launch_prefill_blas.
std::vector<const void*> prefill_blas_pointers(const PrefillAttentionParams& p, const float* scores);

// A prefill attention request's plan (kind prefill_attention, impls own and
// blas): its limits, and when it can run, the params (every pointer null, for
// the op to set); the blas path's scratch is its score matrix and pointer arrays.
struct PrefillAttentionPlan : OpPlan {
  bool blas = false;
  PrefillAttentionParams params;
};
std::shared_ptr<const PrefillAttentionPlan> plan_prefill_attention(const OpRequest& r, const Context& ctx);

}  // namespace phasebench::cuda
