#pragma once
// Decode attention's kernels (decode_attention.hpp has the layouts and the
// params; decode_attention.cu launches them): a CTA walks one chunk of one
// sequence's context for up to 8 query rows of a KV head (its GQA heads times
// the step's new tokens). 8 rows run on tensor cores (decode_attention_mma_kernel),
// 1, 2 or 4 rows with CUDA-core dot products (decode_attention_kernel); split
// chunks write partial results that decode_reduce_kernel merges per row.
// Device code only, in the anonymous namespace of the one file that includes it
// (decode_attention.cu), so the kernels' names are that file's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "attention_util.cuh"
#include "ptx.cuh"

namespace phasebench::cuda {

namespace {
// 4 warps per CTA. Each warp splits into lane groups of D/8 lanes; a lane
// group holds one token's row (16-byte vectors along D, 8 elements per lane),
// so a warp has 32/(D/8) tokens in flight per step (4, 2 or 1) and each lane
// group issues U tokens' K and V loads before it uses any of them.
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

// KV row addressing: element offset of token t of (batch b, kv head h).
template <int D>
struct ContiguousKV {
  int Hkv, L;
  __device__ __forceinline__ std::size_t row(int b, int h, int t) const {
    return ((static_cast<std::size_t>(b) * Hkv + h) * L + t) * D;
  }
};

// page_shift >= 0: the page size is 2^page_shift, and a token's page and slot
// are a shift and a mask instead of an integer division (tens of instructions).
template <int D>
struct PagedKV {
  const std::int32_t* __restrict__ block_table;
  int Hkv, page_size, pages_per_seq, page_shift;
  __device__ __forceinline__ std::size_t row(int b, int h, int t) const {
    const int lp = page_shift >= 0 ? t >> page_shift : t / page_size;
    const int slot = page_shift >= 0 ? t & (page_size - 1) : t % page_size;
    const int page = __ldg(block_table + static_cast<std::size_t>(b) * pages_per_seq + lp);
    return ((static_cast<std::size_t>(page) * Hkv + h) * page_size + slot) * D;
  }
};

// Where a CTA's query rows go: the output when its chunk is the whole context,
// else the split's partial (the log2-sum-exp2 of its scores, then D values), which
// decode_reduce_kernel merges.
struct RowSink {
  std::uint16_t* out;
  float* part;
  const float* kv_scales;
  int b, S, G, R, g0, Hq, Hkv, kvh, split, splits;
};

// The CTA's warps' online-softmax states merged per row and stored: warp w's
// running max and sum of row g are m[w * GT + g] and l[w * GT + g], its
// unnormalised output warp_out(w, g, d). Rows past R (padding) are not stored.
template <class Tag, int D, int GT, bool F8, class WarpOut>
__device__ __forceinline__ void merge_warps_and_store(const float* m, const float* l, WarpOut warp_out, const RowSink& k) {
  for (int idx = threadIdx.x; idx < GT * D; idx += kThreads) {
    const int g = idx / D;
    const int d = idx % D;
    if (k.g0 + g >= k.R) continue;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m[w * GT + g]);
    float Ls = 0.f, A = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(m[w * GT + g] - M);
        Ls += l[w * GT + g] * f;
        A += warp_out(w, g, d) * f;
      }
    }
    const int r = k.g0 + g;
    const std::size_t row = static_cast<std::size_t>(k.b * k.S + r / k.G) * k.Hq + k.kvh * k.G + r % k.G;
    const float vscale = F8 ? __ldg(k.kv_scales + k.Hkv + k.kvh) : 1.f;
    const float o = Ls > 0.f ? A / Ls * vscale : 0.f;
    if (k.splits == 1) {
      k.out[row * D + d] = encode<Tag>(o);
    } else {
      float* po = k.part + (row * k.splits + k.split) * (D + 1);
      po[1 + d] = o;
      if (d == 0) po[0] = Ls > 0.f ? M + log2f(Ls) : -INFINITY;  // log2-sum-exp2 of this split's scores
    }
  }
}

// F8: the cache holds fp8 e4m3 (8 bytes per lane and token) with per-head scales.
// A CTA computes GT of the S*G query rows of its KV head, row r being new token
// r / G of query head kvh*G + r % G; every row sees the keys before its own
// position (len_b - S + 1 + r / G of them), so the S new tokens are causal among
// themselves and share each K/V load.
template <class Tag, int D, int GT, int U, class KV, bool F8>
__global__ void __launch_bounds__(kThreads)
    decode_attention_kernel(const std::uint16_t* __restrict__ q, std::uint16_t* __restrict__ out,
                            const void* __restrict__ kc, const void* __restrict__ vc, KV kv,
                            const float* __restrict__ kv_scales, float* __restrict__ part, int Hq, int Hkv, int G, int L,
                            int S, const int* __restrict__ lengths, int chunk, int splits, float qscale) {
  using Vec = std::conditional_t<F8, uint2, uint4>;  // 8 elements of the cache
  constexpr int kElemBytes = F8 ? 1 : 2;
  constexpr int LPT = D / 8;        // lanes per token: 8, 16, 32
  constexpr int TPW = 32 / LPT;     // tokens per warp per step: 4, 2, 1
  constexpr int NG = kWarps * TPW;  // lane groups per CTA
  constexpr int STEP = NG * U;      // tokens per CTA per iteration
  constexpr float kNegInf = -INFINITY;

  const int split = blockIdx.x;
  const int kvh = blockIdx.y % Hkv;
  const int hchunk = blockIdx.y / Hkv;
  const int b = blockIdx.z;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int sub = lane % LPT;              // which 8 elements of D
  const int gi = warp * TPW + lane / LPT;  // lane group in the CTA
  const int len = lengths ? __ldg(lengths + b) : L;  // this sequence's context
  const int t0 = split * chunk;
  const int t1 = min(len, t0 + chunk);  // past the end for the splits of a short sequence: no tokens
  const int g0 = hchunk * GT;  // first query row of this chunk within the KV head's S*G
  const int R = S * G;
  // Row g's query token (b*S + new token), query head, and the keys it sees.
  int qtok[GT], qh[GT], seen[GT];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    const int r = min(g0 + g, R - 1);  // rows past R compute a copy of the last one, never stored
    qtok[g] = b * S + r / G;
    qh[g] = kvh * G + r % G;
    seen[g] = len - S + 1 + r / G;
  }

  // The group's queries, pre-scaled by scale*log2(e) (and K's scale for an fp8
  // cache): scores are in the log2 domain.
  if constexpr (F8) qscale *= __ldg(kv_scales + kvh);
  float qf[GT][8];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    if (g0 + g < R) {
      const uint4 u =
          __ldg(reinterpret_cast<const uint4*>(q + (static_cast<std::size_t>(qtok[g]) * Hq + qh[g]) * D) + sub);
      unpack8<Tag>(u, qf[g]);
#pragma unroll
      for (int i = 0; i < 8; ++i) qf[g][i] *= qscale;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) qf[g][i] = 0.f;
    }
  }

  float m[GT], l[GT], acc[GT][8];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    m[g] = kNegInf;
    l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.f;
  }

  // The loop bounds are uniform across the CTA, so every lane reaches the shuffles.
  for (int base = t0; base < t1; base += STEP) {
    Vec kr[U], vr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int t = base + u * NG + gi;
      if (t < t1) {
        const std::size_t off = (kv.row(b, kvh, t) + static_cast<std::size_t>(sub) * 8) * kElemBytes;
        kr[u] = __ldg(reinterpret_cast<const Vec*>(static_cast<const unsigned char*>(kc) + off));
        vr[u] = __ldg(reinterpret_cast<const Vec*>(static_cast<const unsigned char*>(vc) + off));
      } else {
        kr[u] = Vec{};
        vr[u] = Vec{};
      }
    }
    // 8 cache elements to floats (fp8: unscaled; the scales are applied outside the loop).
    auto unpack_kv = [](const Vec& r, float (&f)[8]) {
      if constexpr (F8)
        unpack8_fp8(r, f);
      else
        unpack8<Tag>(r, f);
    };
    float s[U][GT];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      unpack_kv(kr[u], kf);
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) d = fmaf(qf[g][i], kf[i], d);
        s[u][g] = d;
      }
    }
    // Sum the partial dot products over the LPT lanes of each token.
#pragma unroll
    for (int o = LPT / 2; o > 0; o >>= 1)
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int g = 0; g < GT; ++g) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], o);
    // Tokens past the chunk, and the later new tokens a row must not see.
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int t = base + u * NG + gi;
#pragma unroll
      for (int g = 0; g < GT; ++g)
        if (t >= t1 || t >= seen[g]) s[u][g] = kNegInf;
    }

    // Online softmax: new running max, rescale the old state, add this step's tokens.
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = fmaxf(mx, s[u][g]);
      const bool empty = (mx == kNegInf);  // no valid token seen yet by this lane group
      const float alpha = empty ? 1.f : exp2f(m[g] - mx);
      m[g] = mx;
      l[g] *= alpha;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] *= alpha;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        s[u][g] = empty ? 0.f : exp2f(s[u][g] - mx);  // masked tokens: exp2(-inf) = 0
        l[g] += s[u][g];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[8];
      unpack_kv(vr[u], vf);
#pragma unroll
      for (int g = 0; g < GT; ++g)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(s[u][g], vf[i], acc[g][i]);
    }
  }

  // Merge the lane groups of a warp (a butterfly: afterwards every group holds the merge).
#pragma unroll
  for (int o = LPT; o < 32; o <<= 1) {
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float lo = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float mn = fmaxf(m[g], mo);
      const float a = (mn == kNegInf) ? 0.f : exp2f(m[g] - mn);
      const float c = (mn == kNegInf) ? 0.f : exp2f(mo - mn);
      m[g] = mn;
      l[g] = l[g] * a + lo * c;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[g][i], o);
        acc[g][i] = acc[g][i] * a + ao * c;
      }
    }
  }

  // Merge the warps through shared memory.
  __shared__ float sm_m[kWarps][GT];
  __shared__ float sm_l[kWarps][GT];
  __shared__ __align__(16) float sm_acc[kWarps][GT][D];
  if (lane < LPT) {  // lane group 0 of each warp; sub == lane here
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      if (sub == 0) {
        sm_m[warp][g] = m[g];
        sm_l[warp][g] = l[g];
      }
      // Two 16-byte stores a lane (8 scalar ones would be 4-way bank conflicts each).
      float4* dst = reinterpret_cast<float4*>(&sm_acc[warp][g][sub * 8]);
      dst[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
      dst[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
    }
  }
  __syncthreads();
  merge_warps_and_store<Tag, D, GT, F8>(&sm_m[0][0], &sm_l[0][0], [&](int w, int g, int d) { return sm_acc[w][g][d]; },
                                        RowSink{out, part, kv_scales, b, S, G, R, g0, Hq, Hkv, kvh, split, splits});
}

// ---- tensor-core kernel for 8 query rows per CTA (GQA groups of 8, multi-token steps) ----
//
// decode_attention_mma_kernel computes what decode_attention_kernel computes for GT = 8
// (the same grid, masking and split partials), with QK^T and PV on tensor cores
// (mma.sync m16n8k16, fp32 accumulate) and the CTA's 8 query rows as the N = 8 side:
//   S^T [16 tokens x 8 rows] = K tile [16 x D] . Q^T [D x 8]   (K as A by ldmatrix, Q^T as B
//                                                              from registers, loaded once)
//   O^T [D x 8] += V^T [D x 16 tokens] . P^T [16 tokens x 8]   (V^T as A by ldmatrix.trans)
// Each of the 4 warps walks its own 16-token tiles of the chunk (tiles w, w + 4, ...) with
// its own two-stage cp.async pipeline (tile j + 1 in flight while tile j is computed; a
// warp waits for its own copies and orders them with __syncwarp, no CTA barrier in the
// loop). An fp8 cache is copied raw and dequantised to the 16-bit type in shared memory
// (exact: e4m3 values are bf16/fp16 values), its scales applied outside as before.
// The accumulator of S^T holds (token g / g + 8, rows 2t, 2t + 1) per lane (g = lane / 4,
// t = lane % 4), while P^T as the B operand wants (tokens 2t, 2t + 1 / + 8, row g): P is
// staged through a 256-byte tile per warp (two 4-byte stores and one ldmatrix.x2.trans),
// cheaper than the 4 shuffles plus selects and packing of a register transpose. The online
// softmax runs per row (per accumulator column) with 3 shuffles across the 8 lanes of a
// column; the warps' (m, l, O) are merged in shared memory at the end.
// ptxas -v (CUDA 13), registers, no spills anywhere; dynamic shared memory (16-bit / fp8 cache):
//   head_dim  64: sm_80 89-91,   sm_90 91-96,   37.0 / 35.0 KiB
//   head_dim 128: sm_80 126-132, sm_90 133-139, 69.0 / 67.0 KiB  (3 CTAs per H200 SM, 2 per A100 SM)
//   head_dim 256: sm_80 147-179, sm_90 158-185, 133.0 / 131.0 KiB (1 CTA per SM)
// (the CUDA-core kernel at 8 rows took 216-255 registers, 2 CTAs per SM, 2 tokens in flight per lane group).
template <int D, bool F8>
struct MmaConfig {
  static constexpr int kTile = 16;    // tokens per warp tile (the M of S^T)
  static constexpr int LD = D + 8;    // 16-bit elements per shared row: ldmatrix phases conflict-free
  static constexpr std::size_t tile = std::size_t(kTile) * LD * 2;  // one K or V tile, 16-bit
  static constexpr std::size_t raw = std::size_t(kTile) * D;         // one fp8 K or V tile
  static constexpr std::size_t p_tile = kTile * 8 * 2;              // P^T [16 tokens][8 rows], 16-bit
  // Per warp, 16-bit cache: K0 V0 K1 V1 P; fp8: K V (dequantised) rawK0 rawV0 rawK1 rawV1 P.
  static constexpr std::size_t warp_bytes = F8 ? 2 * tile + 4 * raw + p_tile : 4 * tile + p_tile;
  static constexpr int DP = D + 4;  // floats per row of the warps' O in the final merge (reuses the tiles)
  static constexpr std::size_t merge_bytes = std::size_t(kWarps) * 8 * DP * 4;
  static constexpr std::size_t smem = warp_bytes * kWarps > merge_bytes ? warp_bytes * kWarps : merge_bytes;
  static_assert(tile % 16 == 0 && raw % 16 == 0 && warp_bytes % 16 == 0, "16-byte aligned regions");
};


// minBlocks 2 caps nothing (255 registers) but keeps ptxas from squeezing head_dim 64 paged
// into 64 registers with spills.
template <class Tag, int D, class KV, bool F8>
__global__ void __launch_bounds__(kThreads, 2)
    decode_attention_mma_kernel(const std::uint16_t* __restrict__ q, std::uint16_t* __restrict__ out,
                                const void* __restrict__ kc, const void* __restrict__ vc, KV kv,
                                const float* __restrict__ kv_scales, float* __restrict__ part, int Hq, int Hkv, int G,
                                int L, int S, const int* __restrict__ lengths, int chunk, int splits, float qscale) {
  using C = MmaConfig<D, F8>;
  constexpr int GT = 8, LD = C::LD, T = C::kTile;
  constexpr int KD = D / 16;  // k-steps of S^T, m-tiles of O^T
  constexpr float kNegInf = -INFINITY;
  extern __shared__ __align__(128) unsigned char mma_smem[];  // named apart from the reduce kernel's float array

  const int split = blockIdx.x;
  const int kvh = blockIdx.y % Hkv;
  const int hchunk = blockIdx.y / Hkv;
  const int b = blockIdx.z;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;  // the fragments' groupID and threadID_in_group
  const int len = lengths ? __ldg(lengths + b) : L;
  const int t0 = split * chunk;
  const int t1 = min(len, t0 + chunk);  // <= t0 for the splits past a short sequence's end: no tiles
  const int g0 = hchunk * GT;
  const int R = S * G;
  if constexpr (F8) qscale *= __ldg(kv_scales + kvh);

  // Q^T as the B operand: lane (g, t) holds row g's elements 16kk + 2t, +1 (b0) and
  // 16kk + 8 + 2t, +1 (b1); rows past R are zero (computed, never stored).
  unsigned qb[KD][2];
  {
    const int r = g0 + g;
    if (r < R) {
      const std::uint16_t* qrow = q + (static_cast<std::size_t>(b * S + r / G) * Hq + kvh * G + r % G) * D + 2 * t;
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) {
        qb[kk][0] = __ldg(reinterpret_cast<const unsigned*>(qrow + kk * 16));
        qb[kk][1] = __ldg(reinterpret_cast<const unsigned*>(qrow + kk * 16 + 8));
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) qb[kk][0] = qb[kk][1] = 0u;
    }
  }
  // This lane's accumulator columns are rows 2t and 2t + 1: tokens at or past lim are masked
  // (the chunk's end, and the row's causal limit len - S + 1 + r / G).
  int lim[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = min(g0 + 2 * t + i, R - 1);
    lim[i] = min(t1, len - S + 1 + r / G);
  }

  // This warp's tiles: w, w + kWarps, ... of the chunk's ceil((t1 - t0) / 16).
  const int n_tiles = t1 > t0 ? (t1 - t0 + T - 1) / T : 0;
  const int n_mine = n_tiles > warp ? (n_tiles - warp + kWarps - 1) / kWarps : 0;
  unsigned char* wsm = mma_smem + warp * C::warp_bytes;
  const unsigned ws = smem_addr(wsm);
  // 16-bit: stage s's K at ws + 2s tile, V at + (2s + 1) tile. fp8: dequantised K, V first.
  const unsigned conv = ws;
  const unsigned raw0 = ws + static_cast<unsigned>(2 * C::tile);
  const unsigned p_s = ws + static_cast<unsigned>(C::warp_bytes - C::p_tile);
  auto stage_k = [&](int s) -> unsigned {
    return F8 ? raw0 + static_cast<unsigned>(2 * s * C::raw) : ws + static_cast<unsigned>(2 * s * C::tile);
  };
  auto stage_v = [&](int s) -> unsigned {
    return F8 ? raw0 + static_cast<unsigned>((2 * s + 1) * C::raw) : ws + static_cast<unsigned>((2 * s + 1) * C::tile);
  };
  // Issue tile j of this warp into stage j & 1 (tokens past t1 zero-filled) and commit.
  // A tile never crosses a page: it starts at a multiple of 16 and pages are multiples of 16.
  auto issue = [&](int j) {
    const int tb = t0 + (warp + j * kWarps) * T;
    constexpr int kEB = F8 ? 1 : 2;
    constexpr int VPR = D * kEB / 16;  // 16-byte vectors per token row
    constexpr int ROW = F8 ? D : LD * 2;  // shared bytes per token row
    const std::size_t base = kv.row(b, kvh, tb) * kEB;  // byte offset of token tb; the tile's rows follow
    const unsigned char* ksrc = static_cast<const unsigned char*>(kc) + base;
    const unsigned char* vsrc = static_cast<const unsigned char*>(vc) + base;
    const unsigned dk = stage_k(j & 1), dv = stage_v(j & 1);
#pragma unroll
    for (int it = 0; it < T * VPR / 32; ++it) {
      const int i = it * 32 + lane;
      const int r = i / VPR, c = i % VPR;
      const bool in = tb + r < t1;
      const int off = (in ? r : 0) * D * kEB + c * 16;  // rows past t1 read nothing (zero-filled)
      const unsigned so = static_cast<unsigned>(r * ROW + c * 16);
      cp_async_16(dk + so, ksrc + off, in ? 16 : 0);
      cp_async_16(dv + so, vsrc + off, in ? 16 : 0);
    }
    cp_async_commit();
  };

  float o[KD][4];
#pragma unroll
  for (int mt = 0; mt < KD; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};  // l: this lane's share of the row sums

  // ldmatrix row addresses of this lane (matrix i = lane / 8, row j = lane % 8), as offsets:
  // K (A): tokens 0-15, d 0/8; V^T (A, .trans of V): tokens (lane & 7) + 8 (lane / 16), d 0/8.
  const unsigned k_off = static_cast<unsigned>(((lane & 15) * LD + (lane >> 4) * 8) * 2);
  const unsigned v_off = static_cast<unsigned>((((lane & 7) + (lane >> 4) * 8) * LD + ((lane >> 3) & 1) * 8) * 2);

  if (n_mine > 0) issue(0);
  for (int j = 0; j < n_mine; ++j) {
    if (j + 1 < n_mine)
      issue(j + 1);
    else
      cp_async_commit();  // an empty group: the wait below always leaves exactly one group pending
    cp_async_wait<1>();   // tile j landed (this lane's copies) ...
    __syncwarp();         // ... and the whole warp's
    const int tb = t0 + (warp + j * kWarps) * T;
    unsigned ks, vs;
    if constexpr (F8) {
      // Dequantise the raw tiles (8 elements per step) into the 16-bit K and V tiles.
      const unsigned char* rk = wsm + (stage_k(j & 1) - ws);
      const unsigned char* rv = wsm + (stage_v(j & 1) - ws);
#pragma unroll
      for (int it = 0; it < T * D / 8 / 32; ++it) {
        const int i = it * 32 + lane;
        const int r = i / (D / 8), c = i % (D / 8);
        const uint2 uk = *reinterpret_cast<const uint2*>(rk + r * D + c * 8);
        const uint2 uv = *reinterpret_cast<const uint2*>(rv + r * D + c * 8);
        float fk[8], fv[8];
        unpack8_fp8(uk, fk);
        unpack8_fp8(uv, fv);
        const uint4 pk = make_uint4(pack2(Tag{}, fk[0], fk[1]), pack2(Tag{}, fk[2], fk[3]), pack2(Tag{}, fk[4], fk[5]),
                                    pack2(Tag{}, fk[6], fk[7]));
        const uint4 pv = make_uint4(pack2(Tag{}, fv[0], fv[1]), pack2(Tag{}, fv[2], fv[3]), pack2(Tag{}, fv[4], fv[5]),
                                    pack2(Tag{}, fv[6], fv[7]));
        *reinterpret_cast<uint4*>(wsm + (r * LD + c * 8) * 2) = pk;
        *reinterpret_cast<uint4*>(wsm + C::tile + (r * LD + c * 8) * 2) = pv;
      }
      __syncwarp();
      ks = conv;
      vs = conv + static_cast<unsigned>(C::tile);
    } else {
      ks = stage_k(j & 1);
      vs = stage_v(j & 1);
    }

    // S^T = K Q^T, scaled to the log2 domain.
    float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      unsigned a[4];
      ldmatrix_x4(a, ks + k_off + kk * 32);
      mma_16816(Tag{}, s, a, qb[kk][0], qb[kk][1]);
    }
    // s[0]: (token tb + g, row 2t), s[1]: (tb + g, 2t + 1), s[2], s[3]: token tb + g + 8.
    const int ta = tb + g, tbb = ta + 8;
    s[0] = ta < lim[0] ? s[0] * qscale : kNegInf;
    s[1] = ta < lim[1] ? s[1] * qscale : kNegInf;
    s[2] = tbb < lim[0] ? s[2] * qscale : kNegInf;
    s[3] = tbb < lim[1] ? s[3] * qscale : kNegInf;

    // Online softmax per row: the tile's max over the 8 lanes of a column (the g's).
    float mx[2] = {fmaxf(s[0], s[2]), fmaxf(s[1], s[3])};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 4));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 8));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 16));
      mx[i] = fmaxf(mx[i], m[i]);
    }
    // A row with no valid token yet keeps a zero base, so exp2 never sees -inf - -inf.
    const float base0 = mx[0] == kNegInf ? 0.f : mx[0];
    const float base1 = mx[1] == kNegInf ? 0.f : mx[1];
    const float alpha0 = exp2f(m[0] - base0), alpha1 = exp2f(m[1] - base1);  // 0 while the old max is -inf
    m[0] = mx[0];
    m[1] = mx[1];
    const float p0 = exp2f(s[0] - base0), p1 = exp2f(s[1] - base1);
    const float p2 = exp2f(s[2] - base0), p3 = exp2f(s[3] - base1);
    l[0] = l[0] * alpha0 + p0 + p2;
    l[1] = l[1] * alpha1 + p1 + p3;
#pragma unroll
    for (int mt = 0; mt < KD; ++mt) {
      o[mt][0] *= alpha0;
      o[mt][1] *= alpha1;
      o[mt][2] *= alpha0;
      o[mt][3] *= alpha1;
    }

    // P^T through shared memory: [16 tokens][8 rows] 16-bit, then B fragments by ldmatrix.x2.trans.
    *reinterpret_cast<unsigned*>(wsm + (C::warp_bytes - C::p_tile) + g * 16 + t * 4) = pack2(Tag{}, p0, p1);
    *reinterpret_cast<unsigned*>(wsm + (C::warp_bytes - C::p_tile) + (g + 8) * 16 + t * 4) = pack2(Tag{}, p2, p3);
    __syncwarp();
    unsigned pb0, pb1;
    ldmatrix_x2_trans(pb0, pb1, p_s + static_cast<unsigned>((lane & 15) * 16));

    // O^T += V^T P^T: m-tile mt is d 16mt .. 16mt + 15.
#pragma unroll
    for (int mt = 0; mt < KD; ++mt) {
      unsigned a[4];
      ldmatrix_x4_trans(a, vs + v_off + mt * 32);
      mma_16816(Tag{}, o[mt], a, pb0, pb1);
    }
    __syncwarp();  // the warp is done with stage j & 1 (and P) before they are written again
  }
  cp_async_wait<0>();

  // The row sums over the column's 8 lanes.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 4);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 8);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 16);
  }

  // Merge the warps through shared memory (the tiles' space, once every warp is done with it).
  __shared__ float sm_m[kWarps][GT];
  __shared__ float sm_l[kWarps][GT];
  __syncthreads();
  float* sm_o = reinterpret_cast<float*>(mma_smem);  // [kWarps][GT][DP]
  if (g == 0) {
    sm_m[warp][2 * t] = m[0];
    sm_m[warp][2 * t + 1] = m[1];
    sm_l[warp][2 * t] = l[0];
    sm_l[warp][2 * t + 1] = l[1];
  }
#pragma unroll
  for (int mt = 0; mt < KD; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int d = mt * 16 + g + (i >> 1) * 8, row = 2 * t + (i & 1);
      sm_o[(warp * GT + row) * C::DP + d] = o[mt][i];
    }
  __syncthreads();
  merge_warps_and_store<Tag, D, GT, F8>(
      &sm_m[0][0], &sm_l[0][0], [&](int w, int gr, int d) { return sm_o[(w * GT + gr) * C::DP + d]; },
      RowSink{out, part, kv_scales, b, S, G, R, g0, Hq, Hkv, kvh, split, splits});
}

// Combine the splits of one (query token, query head) row:
// out = sum_i 2^(lse_i - M) o_i / sum_i 2^(lse_i - M), M the largest lse.
// All of a CTA's threads share the work: the max and the weights over the
// splits in parallel (warp shuffles, then shared memory), then each warp sums a
// quarter of the splits for every d (lanes along d, so the partials are read
// coalesced), and the warps' sums are added in shared memory. The longest
// dependent chain per thread is splits / kReduceWarps, not 3 * splits.
constexpr int kReduceWarps = 4;
constexpr int kReduceThreads = kReduceWarps * 32;

template <class Tag>
__global__ void __launch_bounds__(kReduceThreads)
    decode_reduce_kernel(const float* __restrict__ part, std::uint16_t* __restrict__ out, int splits, int D) {
  extern __shared__ float smem[];  // [splits] weights, then [kReduceWarps][D] sums
  float* w = smem;
  float* sums = smem + splits;
  __shared__ float red[kReduceWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::size_t row = blockIdx.x;
  const float* p = part + row * splits * (D + 1);
  // The largest lse.
  float M = -INFINITY;
  for (int i = threadIdx.x; i < splits; i += kReduceThreads) M = fmaxf(M, p[static_cast<std::size_t>(i) * (D + 1)]);
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  if (lane == 0) red[warp] = M;
  __syncthreads();
  M = red[0];
  for (int i = 1; i < kReduceWarps; ++i) M = fmaxf(M, red[i]);
  __syncthreads();  // red is reused for the sum of the weights
  // The weights and their sum.
  float W = 0.f;
  for (int i = threadIdx.x; i < splits; i += kReduceThreads) {
    const float lse = p[static_cast<std::size_t>(i) * (D + 1)];
    w[i] = (M == -INFINITY || lse == -INFINITY) ? 0.f : exp2f(lse - M);
    W += w[i];
  }
  for (int o = 16; o > 0; o >>= 1) W += __shfl_xor_sync(0xffffffffu, W, o);
  if (lane == 0) red[warp] = W;
  __syncthreads();
  W = 0.f;
  for (int i = 0; i < kReduceWarps; ++i) W += red[i];
  // Warp `warp` sums splits warp, warp + kReduceWarps, ... for every d.
  for (int d = lane; d < D; d += 32) {
    float a = 0.f;
    for (int i = warp; i < splits; i += kReduceWarps) a = fmaf(w[i], p[static_cast<std::size_t>(i) * (D + 1) + 1 + d], a);
    sums[warp * D + d] = a;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += kReduceThreads) {
    float a = 0.f;
    for (int i = 0; i < kReduceWarps; ++i) a += sums[i * D + d];
    out[row * D + d] = encode<Tag>(W > 0.f ? a / W : 0.f);
  }
}

// The cache addressing of a contiguous or a paged cache.
template <int D, bool Paged>
using KvOf = std::conditional_t<Paged, PagedKV<D>, ContiguousKV<D>>;

}  // namespace

}  // namespace phasebench::cuda
