// Prefill attention's host plan (prefill_attention_plan.hpp): the limits of the
// flash kernel and of the cuBLAS path, the cuBLAS path's buffers, a request's plan.
#include "cuda/prefill_attention_plan.hpp"

#include <cstddef>
#include <exception>

#include "phasebench/checked.hpp"
#include "phasebench/ops/prefill_attention.hpp"

namespace phasebench::cuda {

std::optional<std::string> prefill_attention_unsupported(DType dtype, long long Hq, long long Hkv, long long D, bool blas) {
  if (dtype != DType::bf16 && dtype != DType::fp16)
    return "prefill attention: dtype " + std::string(to_string(dtype)) + " is not supported on CUDA; use bf16 or fp16";
  if (Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0)
    return "prefill attention: query heads (" + std::to_string(Hq) + ") must be a positive multiple of kv heads (" +
           std::to_string(Hkv) + ")";
  if (Hq > 65535) return "prefill attention: at most 65535 query heads";
  if (blas) {
    if (D <= 0 || D % 8 != 0)
      return "prefill attention (cuBLAS): head_dim " + std::to_string(D) + " is not supported; use a multiple of 8";
  } else if (D != 64 && D != 128 && D != 256) {
    return "prefill attention (flash kernel): head_dim " + std::to_string(D) + " is not supported; use 64, 128 or 256";
  }
  return std::nullopt;
}

std::uint64_t prefill_blas_scores_bytes(std::uint64_t B, std::uint64_t Hq, std::uint64_t S) {
  return B * Hq * S * S * 4;
}

int prefill_blas_max_seq(int device) {
  int optin = 0;
  PB_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return optin / static_cast<int>(sizeof(float)) - 64;  // one row of fp32 scores, plus the reduction scratch
}

std::vector<const void*> prefill_blas_pointers(const PrefillAttentionParams& p, const float* scores) {
  const std::size_t S = static_cast<std::size_t>(p.S), D = static_cast<std::size_t>(p.D);
  const std::size_t Hq = static_cast<std::size_t>(p.Hq), Hkv = static_cast<std::size_t>(p.Hkv), G = Hq / Hkv;
  const std::size_t n = static_cast<std::size_t>(p.B) * Hq, SS = S * S;
  const auto* q = static_cast<const std::uint16_t*>(p.q);
  const auto* k = static_cast<const std::uint16_t*>(p.k);
  const auto* v = static_cast<const std::uint16_t*>(p.v);
  auto* out = static_cast<std::uint16_t*>(p.out);
  const auto* P = reinterpret_cast<const std::uint16_t*>(scores);  // 16-bit probabilities over the scores' rows
  std::vector<const void*> ptr(6 * n);
  for (std::size_t b = 0; b < static_cast<std::size_t>(p.B); ++b)
    for (std::size_t hq = 0; hq < Hq; ++hq) {
      const std::size_t i = b * Hq + hq, hkv = hq / G;
      ptr[i] = k + (b * S * Hkv + hkv) * D;          // QK^T: A = K_h (ld Hkv*D)
      ptr[n + i] = q + (b * S * Hq + hq) * D;        //       B = Q_h (ld Hq*D)
      ptr[2 * n + i] = scores + (b * Hq + hq) * SS;  //       C = scores (ld S)
      ptr[3 * n + i] = v + (b * S * Hkv + hkv) * D;  // P V:  A = V_h (ld Hkv*D)
      ptr[4 * n + i] = P + (b * Hq + hq) * SS * 2;   //       B = P (ld 2S)
      ptr[5 * n + i] = out + (b * S * Hq + hq) * D;  //       C = O_h (ld Hq*D)
    }
  return ptr;
}

namespace {

std::optional<std::string> request_unsupported(const OpRequest& r, const Context& ctx) {
  const auto a = PrefillAttentionShape::of(r.shape);
  const bool blas = r.impl == Impl::blas;
  if (auto why = prefill_attention_unsupported(r.dtype, static_cast<long long>(a.Hq), static_cast<long long>(a.Hkv),
                                               static_cast<long long>(a.D), blas))
    return why;
  if (a.B == 0 || a.S == 0) return std::string("prefill attention: batch and prompt length must be >= 1");
  if (a.B > 65535) return "prefill attention: batch " + std::to_string(a.B) + " exceeds 65535 (a grid dimension)";
  if (!blas)
    if (auto why = shared_memory_unsupported("prefill flash attention (head_dim " + std::to_string(a.D) + ")",
                                             prefill_flash_smem_bytes(static_cast<int>(a.D)), ctx))
      return why;
  if (blas) {
    const auto max_s = static_cast<std::uint64_t>(prefill_blas_max_seq(ctx.device));
    if (a.S > max_s)
      return "prefill attention (cuBLAS): prompt " + std::to_string(a.S) + " exceeds the softmax kernel's limit of " +
             std::to_string(max_s) + " (one fp32 score row in shared memory)";
  }
  return std::nullopt;
}

// The cuBLAS path's fp32 score matrix B*Hq*S*S*4 and pointer arrays, beyond the declared footprint.
std::uint64_t scores_bytes(const OpRequest& r, const Context&) {
  const auto a = PrefillAttentionShape::of(r.shape);
  // Plus the two GEMMs' pointer arrays: 6 pointers per (batch, query head).
  return add(mul({a.B, a.Hq, a.S, a.S, 4}, "prefill attention (cuBLAS) score matrix"),
             mul({6, a.B, a.Hq, sizeof(void*)}, "prefill attention (cuBLAS) pointer arrays"));
}

}  // namespace

std::shared_ptr<const PrefillAttentionPlan> plan_prefill_attention(const OpRequest& r, const Context& ctx) {
  return make_plan<PrefillAttentionPlan>(request_unsupported(r, ctx), [&](PrefillAttentionPlan& plan) {
    plan.blas = r.impl == Impl::blas;
    if (plan.blas) {
      try {
        plan.scratch_bytes = scores_bytes(r, ctx);
      } catch (const std::exception& e) {
        plan.unsupported = std::string("size: ") + e.what();
        return;
      }
    }
    const auto a = PrefillAttentionShape::of(r.shape);
    // Every dimension fits in int: the check's 32-bit indexing.
    plan.params = prefill_attention_params(r.dtype, nullptr, nullptr, nullptr, nullptr, static_cast<int>(a.B),
                                           static_cast<int>(a.S), static_cast<int>(a.Hq), static_cast<int>(a.Hkv),
                                           static_cast<int>(a.D));
  });
}

}  // namespace phasebench::cuda
