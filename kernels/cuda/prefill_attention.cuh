#pragma once
// Prefill attention's kernels (prefill_attention.hpp; prefill_attention.cu
// launches them): the flash kernel and the cuBLAS path's causal softmax.
// Device code only, in the anonymous namespace of the one file that includes it
// (prefill_attention.cu), so the kernels' names are that file's.
//
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
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "attention_util.cuh"
#include "ptx.cuh"

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

// ---- the cuBLAS path's softmax ---------------------------------------------

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

}  // namespace phasebench::cuda
