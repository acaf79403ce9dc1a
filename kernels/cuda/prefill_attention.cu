// Prefill attention on CUDA (prefill_attention.hpp): the flash kernel (mma.sync),
// the cuBLAS path with a materialised score matrix, and the operation (kind
// prefill_attention, impls own and blas) verified row by row against the CPU reference.
#include "cuda/prefill_attention.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "reference/common.hpp"
#include "reference/prefill_attention.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/attention_util.cuh"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/ptx.cuh"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/prefill_attention.hpp"

// The flash kernel, in the FlashAttention-2 manner, for any sm_80+ (mma.sync;
// a wgmma/TMA path for sm_90a is not written):
//   - one CTA per (128 query rows, query head, batch); the longest causal tiles first;
//   - head_dim 128 (the target shape): 4 warps of 32 query rows (two m16 row blocks),
//     so each K/V fragment read from shared memory feeds two MMAs, and two CTAs fit an
//     SM (<= 255 registers of 128 threads, 102 KiB each): one CTA's barrier is hidden
//     by the other's work. head_dim 64 and 256: 8 warps of 16 query rows;
//   - S = Q K^T and O += P V on tensor cores with mma.sync.m16n8k16 (fp32
//     accumulate), fragments brought from shared memory by ldmatrix (.trans for V);
//   - S, P and O never leave registers: the m16n8k16 accumulator layout of S is,
//     pair by pair, the A-operand layout of P V, so P is packed to 16 bits in place;
//     the online softmax works on the accumulators with quad shuffles;
//   - K/V tiles of BN keys (64; 32 for head_dim 256) double-buffered by cp.async
//     (16-byte copies, rows past S zero-filled): tile i+1 is in flight while tile i
//     is computed, one barrier per tile;
//   - causal: a CTA reads key tiles up to its last row only, a warp skips tiles wholly
//     after its own last row (and tail warps past S), and only tiles that cross a row
//     block's diagonal are masked;
//   - Q's fragments stay in registers for head_dim 64 (loaded once); head_dim 128
//     (two row blocks) and 256 read them from shared memory at every tile.
// Padded shared-memory rows (D + 8 elements) make every ldmatrix phase conflict-free.
//
// ptxas -v (CUDA 13; bf16 and fp16 alike), registers / spill bytes, dynamic shared memory:
//   head_dim  64: sm_80 128 / 4,  sm_90 128 / 0, 54 KiB  (256 threads, 2 CTAs = 16 warps per SM)
//   head_dim 128: sm_80 255 / 4,  sm_90 255 / 24, 102 KiB (128 threads, 2 CTAs = 8 warps per SM)
//   head_dim 256: sm_80 242 / 0,  sm_90 240 / 0, 132 KiB (256 threads, 1 CTA = 8 warps per SM)
// (8 warps of 16 rows at head_dim 128 took 204 / 215 registers, no spills, but only one
// CTA per SM and twice the ldmatrix traffic; 32-key tiles at head_dim 128 take 254
// registers without spills, at twice the barriers.)
// Shared-memory traffic per 128 x 64 tile at head_dim 128: 4 warps x (16 KiB of K, 16 KiB
// of V, 8 KiB of Q fragments) read by ldmatrix + 32 KiB written by cp.async, 192 KiB for
// 4.2 MFLOP: about as long as the tensor cores take for the MMAs with mma.sync.

namespace phasebench::cuda {

namespace {

constexpr int kBM = 128;  // query rows per CTA

template <int D>
struct FlashConfig {
  static constexpr int BN = D <= 128 ? 64 : 32;  // keys per K/V tile
  // m16 row blocks per warp: head_dim 128 takes two (4 warps of 32 rows), so every K/V
  // fragment read from shared memory feeds two MMAs; 64 and 256 take one (8 warps of 16).
  static constexpr int MT = D == 128 ? 2 : 1;
  static constexpr int kWarps = kBM / (16 * MT);
  static constexpr int kThreads = kWarps * 32;
  static constexpr bool kQInRegs = MT == 1 && D <= 128;  // Q fragments held in registers for the whole CTA
  // CTAs per SM the registers must allow: two for head_dim 64 (<= 128 registers of 256
  // threads, 54 KiB of shared memory each) and 128 (<= 255 of 128 threads, 102 KiB); one for 256.
  static constexpr int kMinBlocks = D == 256 ? 1 : 2;
  static constexpr int LD = D + 8;               // 16-bit elements per shared-memory row (16-byte pad)
  static constexpr std::size_t q_bytes = std::size_t(kBM) * LD * 2;
  static constexpr std::size_t kv_bytes = std::size_t(BN) * LD * 2;
  static constexpr std::size_t total = q_bytes + 4 * kv_bytes;  // Q, then K0, V0, K1, V1
  static_assert(kBM == kWarps * 16 * MT, "the warps' row blocks cover the CTA's rows");
  static_assert(D % 16 == 0 && BN % 16 == 0, "whole m16n8k16 steps");
  static_assert((LD * 2) % 16 == 0 && q_bytes % 128 == 0 && kv_bytes % 128 == 0, "16-byte rows, aligned regions");
  static_assert((kBM * D / 8) % kThreads == 0 && (BN * D / 8) % kThreads == 0, "whole copy rounds");
};


// Rows [r0, r0 + ROWS) of one head of a [B, S, H, D] tensor into a shared tile (row
// stride LD) with cp.async by THREADS threads; rows at or beyond S are zero-filled
// (their source address is row 0's, never read). The caller commits the group.
template <int D, int ROWS, int LD, int THREADS>
__device__ __forceinline__ void load_tile_async(unsigned dst, const std::uint16_t* __restrict__ src, int b, int r0,
                                                int S, int H, int h) {
  constexpr int VPR = D / 8;  // 16-byte vectors per row
#pragma unroll
  for (int it = 0; it < ROWS * VPR / THREADS; ++it) {
    const int i = it * THREADS + static_cast<int>(threadIdx.x);
    const int r = i / VPR;
    const int c = i % VPR;
    const int pos = r0 + r;
    const bool in = pos < S;
    const std::uint16_t* g = src + ((static_cast<std::size_t>(b) * S + (in ? pos : 0)) * H + h) * D + c * 8;
    cp_async_16(dst + static_cast<unsigned>((r * LD + c * 8) * 2), g, in ? 16 : 0);
  }
}

template <class Tag, int D>
__global__ void __launch_bounds__(FlashConfig<D>::kThreads, FlashConfig<D>::kMinBlocks)
    prefill_flash_kernel(const std::uint16_t* __restrict__ q, const std::uint16_t* __restrict__ k,
                         const std::uint16_t* __restrict__ v, std::uint16_t* __restrict__ out, int S, int Hq, int Hkv,
                         float scale_log2) {
  using C = FlashConfig<D>;
  constexpr int BN = C::BN, LD = C::LD, MT = C::MT, TH = C::kThreads;
  constexpr int NB = BN / 8;   // 8-key column blocks of S
  constexpr int DB = D / 8;    // 8-wide column blocks of O
  constexpr int KD = D / 16;   // k-steps of Q K^T
  constexpr int KN = BN / 16;  // k-steps of P V
  constexpr float kNegInf = -INFINITY;
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned Qs = smem_addr(smem);  // .shared addresses: Q, then K0, V0, K1, V1
  auto kv_tile = [&](int buf, int which) {  // which: 0 K, 1 V
    return Qs + static_cast<unsigned>(C::q_bytes + (2 * buf + which) * C::kv_bytes);
  };

  const int qtile = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // longest (last) tiles first
  const int hq = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  const int hkv = hq / (Hq / Hkv);
  const int m0 = qtile * kBM;
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t = lane & 3;  // the accumulator layout's groupID and threadID_in_group
  const int wrow0 = m0 + warp * 16 * MT;  // this warp's first query row
  const int wrow_last = wrow0 + 16 * MT - 1;
  // Row block mt of the warp: accumulator elements 0, 1 in row wrow0 + 16 mt + g ("a"), 2, 3 eight below ("b").
  // ldmatrix row addresses of this lane (matrix i = lane / 8, row j = lane % 8):
  const int qa_row = lane & 15, qa_col = (lane >> 4) << 3;                     // Q (A): rows 0-15, k 0/8
  const int kb_row = ((lane >> 4) << 3) + (lane & 7), kb_col = ((lane >> 3) & 1) << 3;  // K (B): n 0-15, k 0/8
  const int vb_row = (((lane >> 3) & 1) << 3) + (lane & 7), vb_col = (lane >> 4) << 3;  // V (B, .trans): k 0-15, n 0/8

  const int n_end = min(S, m0 + kBM);  // causal: keys up to this CTA's last row
  const int n_tiles = (n_end + BN - 1) / BN;

  load_tile_async<D, kBM, LD, TH>(Qs, q, b, m0, S, Hq, hq);
  load_tile_async<D, BN, LD, TH>(kv_tile(0, 0), k, b, 0, S, Hkv, hkv);
  load_tile_async<D, BN, LD, TH>(kv_tile(0, 1), v, b, 0, S, Hkv, hkv);
  cp_async_commit();

  float o[MT][DB][4];
  float m_a[MT], m_b[MT];  // running max of the raw scores of rows a and b
  float l_a[MT], l_b[MT];  // this lane's share of the running sums
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int j = 0; j < DB; ++j) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.f;
    m_a[mt] = m_b[mt] = kNegInf;
    l_a[mt] = l_b[mt] = 0.f;
  }
  unsigned qf[C::kQInRegs ? KD : 1][4];
  const unsigned q_warp = Qs + static_cast<unsigned>(((warp * 16 * MT + qa_row) * LD + qa_col) * 2);

  for (int it = 0; it < n_tiles; ++it) {
    const int n0 = it * BN;
    cp_async_wait<0>();  // tile it (and Q) landed, for this thread's copies
    __syncthreads();     // ... and everyone's; every warp is also done with tile it-1's buffer
    if (it + 1 < n_tiles) {
      const int nb = (it + 1) & 1;
      load_tile_async<D, BN, LD, TH>(kv_tile(nb, 0), k, b, n0 + BN, S, Hkv, hkv);
      load_tile_async<D, BN, LD, TH>(kv_tile(nb, 1), v, b, n0 + BN, S, Hkv, hkv);
      cp_async_commit();
    }
    if constexpr (C::kQInRegs) {
      if (it == 0) {
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) ldmatrix_x4(qf[kk], q_warp + kk * 32);
      }
    }
    // Nothing to do when every key of this tile is after this warp's last row, or the
    // warp's rows are all past the prompt (a tail CTA); the barrier above is still met.
    if (n0 > wrow_last || wrow0 >= S) continue;
    const unsigned k_lane = kv_tile(it & 1, 0) + static_cast<unsigned>((kb_row * LD + kb_col) * 2);
    const unsigned v_lane = kv_tile(it & 1, 1) + static_cast<unsigned>((vb_row * LD + vb_col) * 2);

    // S (16 MT x BN) = Q K^T: each K fragment serves the warp's MT row blocks.
    float s[MT][NB][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NB; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      unsigned a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (C::kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[mt][i] = qf[kk][i];
        } else {
          ldmatrix_x4(a[mt], q_warp + static_cast<unsigned>((mt * 16 * LD + kk * 16) * 2));
        }
      }
#pragma unroll
      for (int j = 0; j < NB; j += 2) {
        unsigned kb[4];
        ldmatrix_x4(kb, k_lane + static_cast<unsigned>((j * 8 * LD + kk * 16) * 2));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816(Tag{}, s[mt][j], a[mt], kb[0], kb[1]);
          mma_16816(Tag{}, s[mt][j + 1], a[mt], kb[2], kb[3]);
        }
      }
    }

    unsigned pa[MT][KN][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int row_a = wrow0 + mt * 16 + g, row_b = row_a + 8;
      // Mask keys after the row, only where the tile crosses this row block's diagonal.
      if (n0 + BN - 1 > wrow0 + mt * 16) {
#pragma unroll
        for (int j = 0; j < NB; ++j) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int key = n0 + j * 8 + 2 * t + (i & 1);
            if (key > (i < 2 ? row_a : row_b)) s[mt][j][i] = kNegInf;
          }
        }
      }

      // Online softmax on raw scores (the scale is positive, so the maxima are the same);
      // the scale to log2 units goes into one FMA per element: p = exp2(s * scale - max * scale).
      // The new row maxima over the quad (the 4 lanes that share a row):
      float mx_a = m_a[mt], mx_b = m_b[mt];
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        mx_a = fmaxf(mx_a, fmaxf(s[mt][j][0], s[mt][j][1]));
        mx_b = fmaxf(mx_b, fmaxf(s[mt][j][2], s[mt][j][3]));
      }
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
      // A row with no key yet keeps a zero base, so exp2 never sees -inf - -inf.
      const float base_a = mx_a == kNegInf ? 0.f : mx_a * scale_log2;
      const float base_b = mx_b == kNegInf ? 0.f : mx_b * scale_log2;
      const float alpha_a = exp2f(fmaf(m_a[mt], scale_log2, -base_a));  // 0 while the old max is -inf
      const float alpha_b = exp2f(fmaf(m_b[mt], scale_log2, -base_b));
      m_a[mt] = mx_a;
      m_b[mt] = mx_b;

      // P = exp2(S - max), packed to 16 bits as the A operand of P V: k-step ks takes
      // S column blocks 2ks (a0: row a, a1: row b) and 2ks+1 (a2: row a, a3: row b).
      float rs_a = 0.f, rs_b = 0.f;
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        const float p0 = exp2f(fmaf(s[mt][j][0], scale_log2, -base_a));
        const float p1 = exp2f(fmaf(s[mt][j][1], scale_log2, -base_a));
        const float p2 = exp2f(fmaf(s[mt][j][2], scale_log2, -base_b));
        const float p3 = exp2f(fmaf(s[mt][j][3], scale_log2, -base_b));
        rs_a += p0 + p1;
        rs_b += p2 + p3;
        pa[mt][j >> 1][(j & 1) * 2 + 0] = pack2(Tag{}, p0, p1);
        pa[mt][j >> 1][(j & 1) * 2 + 1] = pack2(Tag{}, p2, p3);
      }
      l_a[mt] = l_a[mt] * alpha_a + rs_a;
      l_b[mt] = l_b[mt] * alpha_b + rs_b;
#pragma unroll
      for (int j = 0; j < DB; ++j) {
        o[mt][j][0] *= alpha_a;
        o[mt][j][1] *= alpha_a;
        o[mt][j][2] *= alpha_b;
        o[mt][j][3] *= alpha_b;
      }
    }

    // O (16 MT x D) += P V: each V fragment serves the warp's MT row blocks.
#pragma unroll
    for (int ks = 0; ks < KN; ++ks) {
#pragma unroll
      for (int j = 0; j < DB; j += 2) {
        unsigned vb[4];
        ldmatrix_x4_trans(vb, v_lane + static_cast<unsigned>((ks * 16 * LD + j * 8) * 2));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816(Tag{}, o[mt][j], pa[mt][ks], vb[0], vb[1]);
          mma_16816(Tag{}, o[mt][j + 1], pa[mt][ks], vb[2], vb[3]);
        }
      }
    }
  }

  // The row sums over the quad, then O / l, two elements per 4-byte store.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float la = l_a[mt], lb = l_b[mt];
    la += __shfl_xor_sync(0xffffffffu, la, 1);
    la += __shfl_xor_sync(0xffffffffu, la, 2);
    lb += __shfl_xor_sync(0xffffffffu, lb, 1);
    lb += __shfl_xor_sync(0xffffffffu, lb, 2);
    const float inv_a = la > 0.f ? 1.f / la : 0.f;
    const float inv_b = lb > 0.f ? 1.f / lb : 0.f;
    const int row_a = wrow0 + mt * 16 + g, row_b = row_a + 8;
    std::uint16_t* out_a = out + ((static_cast<std::size_t>(b) * S + row_a) * Hq + hq) * D + 2 * t;
    std::uint16_t* out_b = out + ((static_cast<std::size_t>(b) * S + row_b) * Hq + hq) * D + 2 * t;
#pragma unroll
    for (int j = 0; j < DB; ++j) {
      if (row_a < S) *reinterpret_cast<unsigned*>(out_a + j * 8) = pack2(Tag{}, o[mt][j][0] * inv_a, o[mt][j][1] * inv_a);
      if (row_b < S) *reinterpret_cast<unsigned*>(out_b + j * 8) = pack2(Tag{}, o[mt][j][2] * inv_b, o[mt][j][3] * inv_b);
    }
  }
}

template <class Tag, int D>
void launch_flash_t(const PrefillAttentionParams& p, cudaStream_t stream) {
  constexpr std::size_t smem = FlashConfig<D>::total;
  static bool attribute_set = false;  // once per instantiation (device attribute of the function)
  if (!attribute_set) {
    PB_CUDA_CHECK(cudaFuncSetAttribute(prefill_flash_kernel<Tag, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    attribute_set = true;
  }
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  const dim3 grid(static_cast<unsigned>((p.S + kBM - 1) / kBM), static_cast<unsigned>(p.Hq),
                  static_cast<unsigned>(p.B));
  prefill_flash_kernel<Tag, D><<<grid, FlashConfig<D>::kThreads, smem, stream>>>(
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

PrefillAttentionParams prefill_attention_params(DType t, const void* q, const void* k, const void* v, void* out, int B,
                                                int S, int Hq, int Hkv, int D) {
  return {t, q, k, v, out, B, S, Hq, Hkv, D};
}

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

std::size_t prefill_flash_smem_bytes(int D) {
  switch (D) {
    case 64: return FlashConfig<64>::total;
    case 128: return FlashConfig<128>::total;
    case 256: return FlashConfig<256>::total;
    default: return 0;
  }
}

void launch_prefill_flash(const PrefillAttentionParams& p, cudaStream_t stream) {
  if (auto why = prefill_attention_unsupported(p.dtype, p.Hq, p.Hkv, p.D, false)) throw Unsupported(*why);
  if (p.B <= 0 || p.S <= 0) throw Unsupported("prefill attention: batch and prompt length must be >= 1");
  if (p.B > 65535) throw Unsupported("prefill attention: batch " + std::to_string(p.B) + " exceeds 65535");
  const bool bf16 = p.dtype == DType::bf16;
  switch (p.D) {
    case 64: bf16 ? launch_flash_t<Bf16Tag, 64>(p, stream) : launch_flash_t<Fp16Tag, 64>(p, stream); break;
    case 128: bf16 ? launch_flash_t<Bf16Tag, 128>(p, stream) : launch_flash_t<Fp16Tag, 128>(p, stream); break;
    default: bf16 ? launch_flash_t<Bf16Tag, 256>(p, stream) : launch_flash_t<Fp16Tag, 256>(p, stream); break;
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

void launch_prefill_blas(const PrefillAttentionParams& p, float* scores, const void* const* pointers,
                         cublasHandle_t cublas, cudaStream_t stream) {
  if (auto why = prefill_attention_unsupported(p.dtype, p.Hq, p.Hkv, p.D, true)) throw Unsupported(*why);
  if (p.B <= 0 || p.S <= 0) throw Unsupported("prefill attention: batch and prompt length must be >= 1");
  if (pointers == nullptr) throw std::logic_error("prefill attention (cuBLAS): no pointer arrays");
  const int S = p.S, D = p.D, Hq = p.Hq, Hkv = p.Hkv;
  const cudaDataType_t t = p.dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const float one = 1.f, zero = 0.f;
  const long long n_ll = static_cast<long long>(p.B) * Hq;
  if (n_ll > INT_MAX) throw Unsupported("prefill attention (cuBLAS): more than 2^31 (batch, head) problems");
  const int n = static_cast<int>(n_ll);
  const void* const* ptr = pointers;

  // Scores of every (batch, query head) in one call. Column-major view:
  // C (S_keys x S_queries, ldc S) = K_h^T^T Q_h^T, i.e. row-major scores[i][j] = q_i . k_j.
  PB_CUBLAS_CHECK(cublasGemmBatchedEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, S, S, D, &one, ptr, t, Hkv * D, ptr + n, t,
                                      Hq * D, &zero, const_cast<void* const*>(ptr + 2 * n), CUDA_R_32F, S, n,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));

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

  // O_h = P_h V_h in one call. Column-major view: C (D x S_queries, ldc Hq*D) =
  // V^T (D x S_keys) P^T (S_keys x S_queries, ld 2S).
  PB_CUBLAS_CHECK(cublasGemmBatchedEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, D, S, S, &one, ptr + 3 * n, t, Hkv * D,
                                      ptr + 4 * n, t, 2 * S, &zero, const_cast<void* const*>(ptr + 5 * n), t, Hq * D, n,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
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
    if (blas_) {
      const auto ptrs = prefill_blas_pointers(p_, scores_.as<float>());
      blas_ptrs_ = DeviceBuffer(ptrs.size() * sizeof(void*));
      upload(blas_ptrs_.get(), ptrs.data(), blas_ptrs_.bytes(), ctx.stream);
      PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // `ptrs` goes out of scope
    }
  }

  void run() override {
    if (blas_)
      launch_prefill_blas(p_, scores_.as<float>(), static_cast<const void* const*>(blas_ptrs_.get()), ctx_.cublas,
                          ctx_.stream);
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
    // Rows around the flash kernel's 128-row CTAs, 64- and 32-key tiles and 16-row
    // warps (and the cuBLAS path's same rows).
    std::vector<std::uint64_t> rows;
    for (std::uint64_t tile : {128u, 64u, 32u, 16u})
      for (std::uint64_t r : reference::prefill_rows_to_check(static_cast<std::uint64_t>(S), tile)) rows.push_back(r);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
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

  std::vector<float> output_values() override { return output_as_float(); }
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
  DeviceBuffer q_, k_, v_, out_, scores_, blas_ptrs_;  // blas_ptrs_: the cuBLAS path's pointer arrays
  PrefillAttentionParams p_;
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(prefill_attention) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  auto prepare = [](Context& ctx, const OpRequest& r) -> std::unique_ptr<PreparedOp> {
    return std::make_unique<PrefillAttentionOp>(ctx, r);
  };
  registry.add({kPrefillAttention, Impl::own, takes_16bit, {}, request_unsupported, {}, prepare});
  registry.add({kPrefillAttention, Impl::blas, takes_16bit, {}, request_unsupported, scores_bytes, prepare});
}
