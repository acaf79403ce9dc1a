// Prefill attention on CUDA (prefill_attention.hpp): the flash kernel (WMMA),
// the cuBLAS path with a materialised score matrix, and the operation (kind
// prefill_attention, impls own and blas) verified row by row against the CPU reference.
#include "cuda/prefill_attention.hpp"

#include <mma.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "cpu/reference.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/attention_util.cuh"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/attention.hpp"

// First version of the flash kernel: WMMA 16x16x16 (bf16/fp16 in, fp32
// accumulate), plain synchronous tile loads, scores and P staged through a
// per-warp shared-memory scratch because WMMA's accumulator layout is opaque.
// What would raise it toward the GEMM ceiling, in order of payoff on Hopper:
//   - wgmma (sm_90a) with a 128-row Q tile per warpgroup, K/V brought in by TMA
//     (cp.async.bulk.tensor) into a 2-3 stage mbarrier pipeline, the softmax on
//     the accumulators in registers (no shared-memory round trip for S and P);
//   - FA3-style warp specialisation (producer warp for TMA, two consumer
//     warpgroups ping-ponging softmax and GEMMs) and intra-warpgroup overlap;
//   - short of that, on any sm_80+: mma.sync m16n8k16 with ldmatrix (documented
//     fragment layouts, so S and P stay in registers) and cp.async double buffering.

namespace phasebench::cuda {

namespace {

using namespace nvcuda;

constexpr int kBM = 64;         // query rows per CTA
constexpr int kBN = 64;         // keys per K/V tile
constexpr int kWarps = 4;       // 16 query rows each
constexpr int kThreads = kWarps * 32;
static_assert(kBM == kWarps * 16, "one 16-row WMMA tile per warp");
static_assert(kBM == kBN, "the causal loop relies on square tiles (the diagonal tile starts at the Q tile's first row)");

template <int D>
struct FlashLayout {
  static constexpr int LDT = D + 8;                          // 16-bit elements per Q/K/V smem row (16-byte pad)
  static constexpr int LDS = (D > kBN ? D : kBN) + 4;        // floats per scratch row (S tile, then P V tile)
  static constexpr int LDP = kBN + 8;                        // 16-bit elements per P row
  static constexpr std::size_t q_bytes = std::size_t(kBM) * LDT * 2;
  static constexpr std::size_t kv_bytes = std::size_t(kBN) * LDT * 2;
  static constexpr std::size_t scratch_bytes = std::size_t(kWarps) * 16 * LDS * 4;
  static constexpr std::size_t p_bytes = std::size_t(kWarps) * 16 * LDP * 2;
  static constexpr std::size_t off_k = q_bytes;
  static constexpr std::size_t off_v = off_k + kv_bytes;
  static constexpr std::size_t off_s = off_v + kv_bytes;
  static constexpr std::size_t off_p = off_s + scratch_bytes;
  static constexpr std::size_t total = off_p + p_bytes;
  // WMMA pointers must be 256-bit aligned: every region and every 16-row block is.
  static_assert(off_k % 128 == 0 && off_v % 128 == 0 && off_s % 128 == 0 && off_p % 128 == 0, "smem alignment");
  static_assert((16 * LDT * 2) % 32 == 0 && (16 * LDS * 4) % 32 == 0 && (16 * LDP * 2) % 32 == 0, "wmma alignment");
};

// Copy rows [r0, r0+rows) of one head of a [B, S, H, D] tensor into a smem tile
// (row stride LDT), zero rows at or beyond S.
template <int D, int LDT>
__device__ __forceinline__ void load_tile(std::uint16_t* __restrict__ dst, const std::uint16_t* __restrict__ src,
                                          int b, int r0, int rows, int S, int H, int h) {
  constexpr int VPR = D / 8;  // 16-byte vectors per row
  for (int i = threadIdx.x; i < rows * VPR; i += kThreads) {
    const int r = i / VPR;
    const int c = i % VPR;
    const int pos = r0 + r;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (pos < S)
      val = __ldg(reinterpret_cast<const uint4*>(src + ((static_cast<std::size_t>(b) * S + pos) * H + h) * D) + c);
    *reinterpret_cast<uint4*>(dst + r * LDT + c * 8) = val;
  }
}

template <class Tag, int D>
__global__ void __launch_bounds__(kThreads)
    prefill_flash_kernel(const std::uint16_t* __restrict__ q, const std::uint16_t* __restrict__ k,
                         const std::uint16_t* __restrict__ v, std::uint16_t* __restrict__ out, int S, int Hq, int Hkv,
                         float scale_log2) {
  using T = typename Tag::native;
  using L = FlashLayout<D>;
  constexpr float kNegInf = -INFINITY;
  extern __shared__ __align__(128) unsigned char smem[];
  auto* Qs = reinterpret_cast<std::uint16_t*>(smem);
  auto* Ks = reinterpret_cast<std::uint16_t*>(smem + L::off_k);
  auto* Vs = reinterpret_cast<std::uint16_t*>(smem + L::off_v);
  auto* Sc = reinterpret_cast<float*>(smem + L::off_s);
  auto* Ps = reinterpret_cast<std::uint16_t*>(smem + L::off_p);

  const int qtile = gridDim.x - 1 - blockIdx.x;  // longest (last) tiles first: better causal load balance
  const int hq = blockIdx.y;
  const int b = blockIdx.z;
  const int hkv = hq / (Hq / Hkv);
  const int m0 = qtile * kBM;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  // Softmax / output ownership: lane -> row r of the warp's 16, half hf of the columns.
  const int r = lane >> 1;
  const int hf = lane & 1;
  const int qpos = m0 + warp * 16 + r;

  float* sc = Sc + warp * 16 * L::LDS;
  std::uint16_t* pw = Ps + warp * 16 * L::LDP;
  const T* qw = reinterpret_cast<const T*>(Qs + warp * 16 * L::LDT);

  load_tile<D, L::LDT>(Qs, q, b, m0, kBM, S, Hq, hq);

  float o[D / 2];
#pragma unroll
  for (int c = 0; c < D / 2; ++c) o[c] = 0.f;
  float m_i = kNegInf, l_i = 0.f;

  const int n_end = min(S, m0 + kBM);  // causal: keys up to the last row of this Q tile
  for (int n0 = 0; n0 < n_end; n0 += kBN) {
    __syncthreads();  // every warp is done with the previous K/V tile
    load_tile<D, L::LDT>(Ks, k, b, n0, kBN, S, Hkv, hkv);
    load_tile<D, L::LDT>(Vs, v, b, n0, kBN, S, Hkv, hkv);
    __syncthreads();

    // S_w (16 x kBN) = Q_w K^T
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> sacc[kBN / 16];
#pragma unroll
      for (int j = 0; j < kBN / 16; ++j) wmma::fill_fragment(sacc[j], 0.f);
#pragma unroll
      for (int kk = 0; kk < D; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::load_matrix_sync(a, qw + kk, L::LDT);
#pragma unroll
        for (int j = 0; j < kBN / 16; ++j) {
          // B[kk'][n] = K[n][kk'] : K rows stored row-major = B column-major.
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bf;
          wmma::load_matrix_sync(bf, reinterpret_cast<const T*>(Ks + j * 16 * L::LDT + kk), L::LDT);
          wmma::mma_sync(sacc[j], a, bf, sacc[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < kBN / 16; ++j) wmma::store_matrix_sync(sc + j * 16, sacc[j], L::LDS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax on row r, columns [hf*kBN/2, (hf+1)*kBN/2); the two lanes of a row combine by shuffle.
    {
      const float* srow = sc + r * L::LDS + hf * (kBN / 2);
      const int nb = n0 + hf * (kBN / 2);
      float mx = kNegInf;
#pragma unroll 8
      for (int c = 0; c < kBN / 2; ++c) {
        const int n = nb + c;
        if (n <= qpos && n < S) mx = fmaxf(mx, srow[c] * scale_log2);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_new = fmaxf(m_i, mx);
      const bool empty = (m_new == kNegInf);
      const float alpha = empty ? 1.f : exp2f(m_i - m_new);
      float rs = 0.f;
      std::uint16_t* prow = pw + r * L::LDP + hf * (kBN / 2);
#pragma unroll 8
      for (int c = 0; c < kBN / 2; ++c) {
        const int n = nb + c;
        const float p = (!empty && n <= qpos && n < S) ? exp2f(srow[c] * scale_log2 - m_new) : 0.f;
        const std::uint16_t pe = encode<Tag>(p);
        prow[c] = pe;
        rs += decode<Tag>(pe);  // the normaliser sums the same (rounded) P the GEMM uses
      }
      rs += __shfl_xor_sync(0xffffffffu, rs, 1);
      l_i = l_i * alpha + rs;
      m_i = m_new;
#pragma unroll
      for (int c = 0; c < D / 2; ++c) o[c] *= alpha;
    }
    __syncwarp();

    // O_tile (16 x D) = P_w V, staged through the scratch, added into the row's registers.
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> oacc[D / 16];
#pragma unroll
      for (int j = 0; j < D / 16; ++j) wmma::fill_fragment(oacc[j], 0.f);
#pragma unroll
      for (int kk = 0; kk < kBN; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::load_matrix_sync(a, reinterpret_cast<const T*>(pw + kk), L::LDP);
#pragma unroll
        for (int j = 0; j < D / 16; ++j) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bf;
          wmma::load_matrix_sync(bf, reinterpret_cast<const T*>(Vs + kk * L::LDT + j * 16), L::LDT);
          wmma::mma_sync(oacc[j], a, bf, oacc[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < D / 16; ++j) wmma::store_matrix_sync(sc + j * 16, oacc[j], L::LDS, wmma::mem_row_major);
    }
    __syncwarp();
    {
      const float* orow = sc + r * L::LDS + hf * (D / 2);
#pragma unroll
      for (int c = 0; c < D / 2; ++c) o[c] += orow[c];
    }
    __syncwarp();  // the scratch is overwritten by the next tile's S
  }

  if (qpos < S) {
    const float inv = l_i > 0.f ? 1.f / l_i : 0.f;
    std::uint16_t* dst = out + ((static_cast<std::size_t>(b) * S + qpos) * Hq + hq) * D + hf * (D / 2);
#pragma unroll
    for (int c = 0; c < D / 2; c += 8) {
      float f[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) f[i] = o[c + i] * inv;
      *reinterpret_cast<uint4*>(dst + c) = pack8<Tag>(f);
    }
  }
}

template <class Tag, int D>
void launch_flash_t(const PrefillAttentionParams& p, cudaStream_t stream) {
  constexpr std::size_t smem = FlashLayout<D>::total;
  static bool attribute_set = false;  // once per instantiation (device attribute of the function)
  if (!attribute_set) {
    PB_CUDA_CHECK(cudaFuncSetAttribute(prefill_flash_kernel<Tag, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    attribute_set = true;
  }
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  const dim3 grid(static_cast<unsigned>((p.S + kBM - 1) / kBM), static_cast<unsigned>(p.Hq),
                  static_cast<unsigned>(p.B));
  prefill_flash_kernel<Tag, D><<<grid, kThreads, smem, stream>>>(
      static_cast<const std::uint16_t*>(p.q), static_cast<const std::uint16_t*>(p.k),
      static_cast<const std::uint16_t*>(p.v), static_cast<std::uint16_t*>(p.out), p.S, p.Hq, p.Hkv, scale_log2);
  PB_CUDA_CHECK_LAUNCH("prefill_flash_kernel");
}

// ---- blas path --------------------------------------------------------------

constexpr int kSoftmaxThreads = 256;

__device__ __forceinline__ float block_reduce(float v, bool is_max, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // `red` may still be read from a previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = is_max ? -INFINITY : 0.f;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) v = is_max ? fmaxf(v, red[w]) : v + red[w];
  return v;
}

// One block per score row (b, hq, i): P[i][j] = softmax_j(scores[i][j] * scale), j <= i, else 0.
// P (16-bit) is written over the first half of the row's own fp32 bytes, so the
// P matrix is the score buffer read as 16-bit elements with leading dimension 2S.
template <class Tag>
__global__ void __launch_bounds__(kSoftmaxThreads) causal_softmax_kernel(float* __restrict__ scores, int S,
                                                                          float scale_log2) {
  extern __shared__ float row[];  // [S]
  __shared__ float red[kSoftmaxThreads / 32];
  const std::size_t ri = blockIdx.x;
  const int i = static_cast<int>(ri % S);
  float* src = scores + ri * S;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const float x = src[j] * scale_log2;
    row[j] = x;
    mx = fmaxf(mx, x);
  }
  mx = block_reduce(mx, true, red);  // its barriers also end every read of src
  float sum = 0.f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const float e = exp2f(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  sum = block_reduce(sum, false, red);
  const float inv = 1.f / sum;
  auto* dst = reinterpret_cast<std::uint16_t*>(src);
  for (int j = threadIdx.x; j < S; j += blockDim.x) dst[j] = encode<Tag>(j <= i ? row[j] * inv : 0.f);
}

}  // namespace

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
  } else if (D != 64 && D != 128) {
    return "prefill attention (flash kernel): head_dim " + std::to_string(D) + " is not supported; use 64 or 128";
  }
  return std::nullopt;
}

std::size_t prefill_flash_smem_bytes(int D) {
  switch (D) {
    case 64: return FlashLayout<64>::total;
    case 128: return FlashLayout<128>::total;
    default: return 0;
  }
}

void launch_prefill_flash(const PrefillAttentionParams& p, cudaStream_t stream) {
  if (auto why = prefill_attention_unsupported(p.dtype, p.Hq, p.Hkv, p.D, false)) throw Unsupported(*why);
  if (p.B <= 0 || p.S <= 0) throw Unsupported("prefill attention: batch and prompt length must be >= 1");
  if (p.B > 65535) throw Unsupported("prefill attention: batch " + std::to_string(p.B) + " exceeds 65535");
  const bool bf16 = p.dtype == DType::bf16;
  if (p.D == 64) {
    if (bf16) launch_flash_t<Bf16Tag, 64>(p, stream);
    else launch_flash_t<Fp16Tag, 64>(p, stream);
  } else {
    if (bf16) launch_flash_t<Bf16Tag, 128>(p, stream);
    else launch_flash_t<Fp16Tag, 128>(p, stream);
  }
}

std::uint64_t prefill_blas_scores_bytes(std::uint64_t B, std::uint64_t Hq, std::uint64_t S) {
  return B * Hq * S * S * 4;
}

int prefill_blas_max_seq(int device) {
  int optin = 0;
  PB_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return optin / static_cast<int>(sizeof(float)) - 64;  // one row of fp32 scores, plus the reduction scratch
}

void launch_prefill_blas(const PrefillAttentionParams& p, float* scores, cublasHandle_t cublas, cudaStream_t stream) {
  if (auto why = prefill_attention_unsupported(p.dtype, p.Hq, p.Hkv, p.D, true)) throw Unsupported(*why);
  if (p.B <= 0 || p.S <= 0) throw Unsupported("prefill attention: batch and prompt length must be >= 1");
  const int S = p.S, D = p.D, Hq = p.Hq, Hkv = p.Hkv, G = p.Hq / p.Hkv;
  const cudaDataType_t t = p.dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const float one = 1.f, zero = 0.f;
  const auto* q = static_cast<const std::uint16_t*>(p.q);
  const auto* k = static_cast<const std::uint16_t*>(p.k);
  const auto* v = static_cast<const std::uint16_t*>(p.v);
  auto* out = static_cast<std::uint16_t*>(p.out);
  const long long SS = static_cast<long long>(S) * S;

  // Scores, per query head, batched over the batch. Column-major view:
  // C (S_keys x S_queries, ldc S) = K_h^T^T Q_h^T, i.e. row-major scores[i][j] = q_i . k_j.
  for (int hq = 0; hq < Hq; ++hq) {
    const int hkv = hq / G;
    PB_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        cublas, CUBLAS_OP_T, CUBLAS_OP_N, S, S, D, &one,
        k + static_cast<std::size_t>(hkv) * D, t, Hkv * D, static_cast<long long>(S) * Hkv * D,
        q + static_cast<std::size_t>(hq) * D, t, Hq * D, static_cast<long long>(S) * Hq * D, &zero,
        scores + static_cast<std::size_t>(hq) * SS, CUDA_R_32F, S, static_cast<long long>(Hq) * SS, p.B,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  const std::size_t smem = static_cast<std::size_t>(S) * sizeof(float);
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  const unsigned long long rows = static_cast<unsigned long long>(p.B) * Hq * S;
  if (rows >= (1ull << 31)) throw Unsupported("prefill attention (cuBLAS): too many score rows for one grid");
  auto launch_softmax = [&](auto tag) {
    using Tag = decltype(tag);
    if (smem > 48 * 1024)
      PB_CUDA_CHECK(cudaFuncSetAttribute(causal_softmax_kernel<Tag>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
    causal_softmax_kernel<Tag><<<static_cast<unsigned>(rows), kSoftmaxThreads, smem, stream>>>(scores, S, scale_log2);
    PB_CUDA_CHECK_LAUNCH("causal_softmax_kernel");
  };
  if (p.dtype == DType::bf16)
    launch_softmax(Bf16Tag{});
  else
    launch_softmax(Fp16Tag{});

  // O_h = P_h V_h. Column-major view: C (D x S_queries, ldc Hq*D) = V^T (D x S_keys) P^T (S_keys x S_queries, ld 2S).
  const auto* P = reinterpret_cast<const std::uint16_t*>(scores);
  for (int hq = 0; hq < Hq; ++hq) {
    const int hkv = hq / G;
    PB_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        cublas, CUBLAS_OP_N, CUBLAS_OP_N, D, S, S, &one,
        v + static_cast<std::size_t>(hkv) * D, t, Hkv * D, static_cast<long long>(S) * Hkv * D,
        P + static_cast<std::size_t>(hq) * SS * 2, t, 2 * S, static_cast<long long>(Hq) * SS * 2, &zero,
        out + static_cast<std::size_t>(hq) * D, t, Hq * D, static_cast<long long>(S) * Hq * D, p.B,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

// ---- the operation ----------------------------------------------------------------

namespace {

std::optional<std::string> request_unsupported(const OpRequest& r, const Context& ctx) {
  const auto a = PrefillAttentionShape::of(r.shape);
  const bool blas = r.impl == Impl::blas;
  if (auto why = prefill_attention_unsupported(r.dtype, static_cast<long long>(a.Hq), static_cast<long long>(a.Hkv),
                                               static_cast<long long>(a.D), blas))
    return why;
  if (a.B == 0 || a.S == 0) return std::string("prefill attention: batch and prompt length must be >= 1");
  if (a.B > 65535) return "prefill attention: batch " + std::to_string(a.B) + " exceeds 65535 (a grid dimension)";
  if (blas) {
    const auto max_s = static_cast<std::uint64_t>(prefill_blas_max_seq(ctx.device));
    if (a.S > max_s)
      return "prefill attention (cuBLAS): prompt " + std::to_string(a.S) + " exceeds the softmax kernel's limit of " +
             std::to_string(max_s) + " (one fp32 score row in shared memory)";
  }
  return std::nullopt;
}

// The cuBLAS path's fp32 score matrix B*Hq*S*S*4, beyond the declared footprint.
std::uint64_t scores_bytes(const OpRequest& r, const Context&) {
  const auto a = PrefillAttentionShape::of(r.shape);
  return mul({a.B, a.Hq, a.S, a.S, 4}, "prefill attention (cuBLAS) score matrix");
}

class PrefillAttentionOp final : public PreparedOp, public AttentionOpAccess {
 public:
  PrefillAttentionOp(Context& ctx, const OpRequest& r) : ctx_(ctx), r_(r), blas_(r.impl == Impl::blas) {
    const auto a = PrefillAttentionShape::of(r.shape);
    p_.dtype = r.dtype;
    p_.B = static_cast<int>(a.B);  // cannot_run checked that every dimension fits in int
    p_.S = static_cast<int>(a.S);
    p_.Hq = static_cast<int>(a.Hq);
    p_.Hkv = static_cast<int>(a.Hkv);
    p_.D = static_cast<int>(a.D);
    const std::size_t es = element_bytes(r.dtype);
    q_elems_ = static_cast<std::size_t>(p_.B) * p_.S * p_.Hq * p_.D;
    kv_elems_ = static_cast<std::size_t>(p_.B) * p_.S * p_.Hkv * p_.D;
    q_ = DeviceBuffer(q_elems_ * es);
    k_ = DeviceBuffer(kv_elems_ * es);
    v_ = DeviceBuffer(kv_elems_ * es);
    out_ = DeviceBuffer(q_elems_ * es);
    if (blas_) scores_ = DeviceBuffer(prefill_blas_scores_bytes(a.B, a.Hq, a.S));
    fill_random(q_.get(), r.dtype, q_elems_, seed_of(r.seed, KvBuf::q), 1.0f, ctx.stream);
    fill_random(k_.get(), r.dtype, kv_elems_, seed_of(r.seed, KvBuf::k), 1.0f, ctx.stream);
    fill_random(v_.get(), r.dtype, kv_elems_, seed_of(r.seed, KvBuf::v), 1.0f, ctx.stream);
    PB_CUDA_CHECK(cudaMemsetAsync(out_.get(), 0, out_.bytes(), ctx.stream));
    // The context's cuBLAS handle is already bound to its stream and workspace
    // (cublasSetStream here would silently drop the workspace).
    if (blas_ && ctx.cublas == nullptr)
      throw std::logic_error("prefill attention (cuBLAS): the context has no cuBLAS handle");
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    p_.q = q_.get();
    p_.k = k_.get();
    p_.v = v_.get();
    p_.out = out_.get();
  }

  void run() override {
    if (blas_)
      launch_prefill_blas(p_, scores_.as<float>(), ctx_.cublas, ctx_.stream);
    else
      launch_prefill_flash(p_, ctx_.stream);
  }

  void verify() override {
    run();
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    corrupt_for_test(fault_, out_.get(), out_.bytes(), ctx_.stream);
    const DType t = r_.dtype;
    const std::size_t es = element_bytes(t);
    const int B = p_.B, S = p_.S, Hq = p_.Hq, Hkv = p_.Hkv, G = Hq / Hkv;
    const std::size_t D = static_cast<std::size_t>(p_.D);
    // (batch, head) pairs: corners and the middle.
    std::vector<std::pair<int, int>> heads = {{0, 0}, {B - 1, Hq - 1}, {B / 2, Hq / 2}, {0, Hq - 1}, {B - 1, 0}};
    std::sort(heads.begin(), heads.end());
    heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
    // Rows around the 64-row tiles of the flash kernel (and the cuBLAS path's same rows).
    const auto rows = reference::prefill_rows_to_check(static_cast<std::uint64_t>(S), 64);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    const reference::Tolerance tol = reference::tolerance_for(t);
    std::vector<float> ref(D);
    for (const auto& [b, hq] : heads) {
      const int hkv = hq / G;
      const std::size_t qrow0 = (static_cast<std::size_t>(b) * S * Hq + hq) * D;
      const std::size_t krow0 = (static_cast<std::size_t>(b) * S * Hkv + hkv) * D;
      const auto q = download_2d_as_float(byte_ptr(q_.get(), qrow0, es), t, S, D, Hq * D, ctx_.stream);
      const auto o = download_2d_as_float(byte_ptr(out_.get(), qrow0, es), t, S, D, Hq * D, ctx_.stream);
      const auto k = download_2d_as_float(byte_ptr(k_.get(), krow0, es), t, S, D, Hkv * D, ctx_.stream);
      const auto v = download_2d_as_float(byte_ptr(v_.get(), krow0, es), t, S, D, Hkv * D, ctx_.stream);
      for (const std::uint64_t row : rows) {
        const int i = static_cast<int>(row);  // row < S, which fits in int
        reference::prefill_attention_row(
            q.data() + i * D, static_cast<std::size_t>(i), D, scale, [&](std::size_t l) { return k.data() + l * D; },
            [&](std::size_t l) { return v.data() + l * D; }, ref.data());
        const std::vector<float> got(o.begin() + static_cast<std::ptrdiff_t>(i * D),
                                     o.begin() + static_cast<std::ptrdiff_t>((i + 1) * D));
        const std::vector<double> want(ref.begin(), ref.end());
        // atol scaled by the row's RMS: late rows average many keys and are small,
        // so a fixed atol would accept a kernel that drops a whole key tile.
        reference::check_rows_close(got, want, D, tol,
                                    shape() + ", batch " + std::to_string(b) + ", query head " + std::to_string(hq) +
                                        ", row " + std::to_string(i) + " (elements are head_dim indices)");
      }
    }
  }

  std::vector<float> output_as_float() override {
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return download_as_float(out_.get(), r_.dtype, q_elems_, ctx_.stream);
  }
  void set_fault_injection(bool on) override { fault_ = on; }

 private:
  std::string shape() const {
    std::ostringstream os;
    os << "prefill attention (" << (blas_ ? "cuBLAS" : "flash") << ") " << to_string(r_.dtype)
       << " B=" << p_.B << " S=" << p_.S << " Hq=" << p_.Hq << " Hkv=" << p_.Hkv << " D=" << p_.D;
    return os.str();
  }

  Context& ctx_;
  OpRequest r_;
  bool blas_;
  bool fault_ = false;
  std::size_t q_elems_ = 0, kv_elems_ = 0;
  DeviceBuffer q_, k_, v_, out_, scores_;
  PrefillAttentionParams p_;
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(prefill_attention) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  auto types = [](DType t, const Context&) { return t == DType::bf16 || t == DType::fp16; };
  auto prepare = [](Context& ctx, const OpRequest& r) -> std::unique_ptr<PreparedOp> {
    return std::make_unique<PrefillAttentionOp>(ctx, r);
  };
  registry.add({kPrefillAttention, Impl::own, types, {}, request_unsupported, {}, prepare});
  registry.add({kPrefillAttention, Impl::blas, types, {}, request_unsupported, scores_bytes, prepare});
}
