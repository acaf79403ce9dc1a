#pragma once
// MLA decode attention's kernels (latent_attention.hpp; latent_attention.cu
// launches them): the absorbed form on tensor cores, a CTA per (16-head tile,
// split, sequence), and the reduction of the splits. Device code only, in the
// anonymous namespace of the one file that includes it (latent_attention.cu),
// so the kernels' names are that file's.
//
// Design. Every one of the H query heads attends over the same latent rows of
// W = R + P = 576 elements, so the cache is what streams and the heads are the
// tensor cores' M side: a CTA takes one tile of 16 heads of one sequence and one
// chunk of its context (split-KV), 4 warps (128 threads).
// - The latent cache goes through shared memory in tiles of 32 tokens (32 x 576
//   bf16, 36 KiB), double-buffered through registers: the 16-byte loads of tile
//   i+1 (18 per thread, ld.global.nc.L1::no_allocate, no L1 pollution) are issued
//   before tile i is computed and stored to the other buffer after it, so a
//   CTA keeps a whole tile (36 KiB) in flight while it computes. Rows are padded
//   to 584 elements (1168 bytes = 292 words, 4 mod 32): the fragment loads below
//   hit 32 distinct banks.
// - Scores S[16 heads, 32 tokens] = Q . C^T (mma.sync m16n8k16, fp32 accumulate):
//   the 576-wide reduction is split over the 4 warps (9 k16 steps each); the
//   head tile's queries stay in shared memory (18 KiB, loaded once; in
//   registers they would push the kernel past 255 registers into spills), each
//   warp's partial S goes through shared memory (10 KiB, rows padded against bank conflicts), where
//   every warp sums the four partials in the same order, so all warps hold the
//   same scores and the same online softmax (log2 domain, running max and sum).
// - O[16 heads, 512] += P . C[:, :512]: each warp owns 128 output columns (16
//   n8 tiles, 64 fp32 accumulators per lane). P's A fragments come straight from
//   the score accumulators (the FlashAttention-2 register reuse); C's B
//   fragments (two tokens per register) are 16-bit shared loads.
// - Tokens past the chunk are zero rows with scores of -inf; heads past H are
//   zero queries whose outputs are not written.
// - splits > 1: each CTA writes its unnormalised O, running max and sum (fp32)
//   to the workspace, and a reduction kernel combines the splits of each
//   (sequence, head). Paged: each row's address goes through the block table,
//   so any page size works and splits need no alignment to pages.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "attention_util.cuh"
#include "cuda/latent_attention.hpp"
#include "ptx.cuh"

namespace phasebench::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kR = kLatentRank, kP = kLatentRopeDim, kW = kR + kP;  // latent width
constexpr int kHeads = kLatentHeadsPerCta;                          // heads per CTA: the MMA's M
constexpr int kTokens = kLatentTileTokens;                          // latent rows per tile
constexpr int kLds = kW + 8;                    // shared row stride in elements (292 words: 4 mod 32)
// The warps' partial scores [warp][head][token] in rows of 40 floats (8 mod 32): the
// float2 stores and loads of a half-warp (heads g = 0..3, token pairs 2t) hit 32
// distinct banks; rows of 32 put the 8 heads of a column in one bank (8-way conflicts).
constexpr int kRedLd = 32 + 8;
constexpr int kKStepsPerWarp = kW / 16 / kWarps;  // 9 k16 steps of the score reduction per warp
constexpr int kColsPerWarp = kR / kWarps;         // 128 output columns per warp
constexpr int kONTiles = kColsPerWarp / 8;        // 16
constexpr int kSNTiles = kTokens / 8;             // 4 score n8 tiles (tokens)
constexpr int kVecPerRow = kW / 8;                // 72 16-byte vectors per latent row
constexpr int kVecPerThread = kTokens * kVecPerRow / kThreads;  // 18
constexpr std::size_t kTileBytes = static_cast<std::size_t>(kTokens) * kLds * 2;
constexpr std::size_t kRedBytes = static_cast<std::size_t>(kWarps) * kHeads * kRedLd * sizeof(float);
constexpr std::size_t kQBytes = static_cast<std::size_t>(kHeads) * kLds * 2;
constexpr std::size_t kSmemBytes = 2 * kTileBytes + kRedBytes + kQBytes;  // 103680
static_assert(kW % (16 * kWarps) == 0 && kR % (8 * kWarps) == 0, "warp split of the latent");
static_assert(kTokens * kVecPerRow % kThreads == 0, "tile loads per thread");
static_assert((kLds * 2) % 16 == 0, "16-byte aligned shared rows");


// LatentParams: latent_attention.hpp.

template <class Tag, bool Paged>
__global__ void __launch_bounds__(kThreads, 2) latent_attention_kernel(LatentParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto* tiles = reinterpret_cast<std::uint16_t*>(smem);          // [2][kTokens][kLds]
  auto* red = reinterpret_cast<float*>(smem + 2 * kTileBytes);    // [kWarps][kHeads][kRedLd]
  auto* qs = reinterpret_cast<std::uint16_t*>(smem + 2 * kTileBytes + kRedBytes);  // [kHeads][kLds]
  constexpr float kNegInf = -INFINITY;

  const int tile = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int h0 = tile * kHeads;
  const int t0 = split * p.chunk;
  const int t1 = min(p.L, t0 + p.chunk);

  // The head tile's queries [16][kLds] in shared memory (rows past H zero): each
  // warp reads its slice (k16 steps warp*9 .. warp*9+8) as A fragments per tile.
  for (int v = threadIdx.x; v < kHeads * kVecPerRow; v += kThreads) {
    const int row = v / kVecPerRow, c = v % kVecPerRow;
    *reinterpret_cast<uint4*>(qs + row * kLds + c * 8) =
        h0 + row < p.H ? __ldg(reinterpret_cast<const uint4*>(p.q + (static_cast<std::size_t>(b) * p.H + h0 + row) * kW) + c)
                       : make_uint4(0u, 0u, 0u, 0u);
  }

  // Token tt's latent row in global memory.
  auto row_of = [&](int tt) -> const std::uint16_t* {
    if constexpr (Paged) {
      const int page = __ldg(p.block_table + static_cast<std::size_t>(b) * p.pages_per_seq + tt / p.page_size);
      return p.cache + (static_cast<std::size_t>(page) * p.page_size + tt % p.page_size) * kW;
    } else {
      return p.cache + (static_cast<std::size_t>(b) * p.L + tt) * kW;
    }
  };
  uint4 stage[kVecPerThread];
  auto load_tile = [&](int base) {
#pragma unroll
    for (int i = 0; i < kVecPerThread; ++i) {
      const int v = threadIdx.x + i * kThreads;
      const int tok = v / kVecPerRow, c = v % kVecPerRow;
      stage[i] = base + tok < t1 ? load_streaming(row_of(base + tok) + c * 8) : make_uint4(0u, 0u, 0u, 0u);
    }
  };
  auto store_tile = [&](int buf) {
#pragma unroll
    for (int i = 0; i < kVecPerThread; ++i) {
      const int v = threadIdx.x + i * kThreads;
      const int tok = v / kVecPerRow, c = v % kVecPerRow;
      *reinterpret_cast<uint4*>(tiles + (static_cast<std::size_t>(buf) * kTokens + tok) * kLds + c * 8) = stage[i];
    }
  };

  float o[kONTiles][4];
#pragma unroll
  for (int j = 0; j < kONTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = 0.f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};  // rows g and g+8 (l: this lane's columns)

  const int ntiles = (t1 - t0 + kTokens - 1) / kTokens;  // >= 1: every split has tokens
  load_tile(t0);
  store_tile(0);
  __syncthreads();
  for (int it = 0; it < ntiles; ++it) {
    const int cur = it & 1, base = t0 + it * kTokens;
    const bool more = it + 1 < ntiles;
    if (more) load_tile(base + kTokens);  // in flight while this tile is computed
    const std::uint16_t* T = tiles + static_cast<std::size_t>(cur) * kTokens * kLds;

    // Partial scores over this warp's 144 columns of the latent.
    float sp[kSNTiles][4];
#pragma unroll
    for (int j = 0; j < kSNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) sp[j][e] = 0.f;
#pragma unroll
    for (int i = 0; i < kKStepsPerWarp; ++i) {
      const int k0 = (warp * kKStepsPerWarp + i) * 16 + 2 * t;
      const unsigned qa[4] = {*reinterpret_cast<const unsigned*>(qs + g * kLds + k0),
                              *reinterpret_cast<const unsigned*>(qs + (g + 8) * kLds + k0),
                              *reinterpret_cast<const unsigned*>(qs + g * kLds + k0 + 8),
                              *reinterpret_cast<const unsigned*>(qs + (g + 8) * kLds + k0 + 8)};
#pragma unroll
      for (int j = 0; j < kSNTiles; ++j) {
        const std::uint16_t* r = T + (j * 8 + g) * kLds + k0;
        mma_16816(Tag{}, sp[j], qa, *reinterpret_cast<const unsigned*>(r), *reinterpret_cast<const unsigned*>(r + 8));
      }
    }
    float* rw = red + warp * kHeads * kRedLd;
#pragma unroll
    for (int j = 0; j < kSNTiles; ++j) {
      const int col = j * 8 + 2 * t;
      *reinterpret_cast<float2*>(rw + g * kRedLd + col) = make_float2(sp[j][0], sp[j][1]);
      *reinterpret_cast<float2*>(rw + (g + 8) * kRedLd + col) = make_float2(sp[j][2], sp[j][3]);
    }
    __syncthreads();

    // Full scores (the four partials summed in the same order by every warp, a pair of
    // tokens at a time), masked past the chunk: s[j][2h + c] is head g + 8h, token col + c.
    float s[kSNTiles][4];
#pragma unroll
    for (int j = 0; j < kSNTiles; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = g + 8 * h, col = j * 8 + 2 * t;
        float2 v = make_float2(0.f, 0.f);
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          const float2 x = *reinterpret_cast<const float2*>(red + (w * kHeads + row) * kRedLd + col);
          v.x += x.x;
          v.y += x.y;
        }
        s[j][2 * h] = base + col < t1 ? v.x * p.scale_log2 : kNegInf;
        s[j][2 * h + 1] = base + col + 1 < t1 ? v.y * p.scale_log2 : kNegInf;
      }

    // Online softmax per row (the 4 lanes of a row hold its 32 scores).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = kNegInf;
#pragma unroll
      for (int j = 0; j < kSNTiles; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);  // finite: the tile has a token of the chunk
      const float alpha = exp2f(m[r] - m_new);
      m[r] = m_new;
      l[r] *= alpha;
#pragma unroll
      for (int j = 0; j < kONTiles; ++j) {
        o[j][2 * r] *= alpha;
        o[j][2 * r + 1] *= alpha;
      }
#pragma unroll
      for (int j = 0; j < kSNTiles; ++j)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          // Rounded to the MMA's input type here, so the sum matches what is multiplied.
          const float pv = decode<Tag>(encode<Tag>(exp2f(s[j][e] - m_new)));
          s[j][e] = pv;
          l[r] += pv;
        }
    }

    // O += P . C[:, cols of this warp]; P's A fragments from the score layout.
    unsigned pa[kTokens / 16][4];
#pragma unroll
    for (int kk = 0; kk < kTokens / 16; ++kk) {
      pa[kk][0] = pack2(Tag{}, s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = pack2(Tag{}, s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = pack2(Tag{}, s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = pack2(Tag{}, s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
#pragma unroll
    for (int j = 0; j < kONTiles; ++j) {
      const int col = warp * kColsPerWarp + j * 8 + g;
#pragma unroll
      for (int kk = 0; kk < kTokens / 16; ++kk) {
        const std::uint16_t* r = T + (kk * 16 + 2 * t) * kLds + col;
        const unsigned b0 = static_cast<unsigned>(r[0]) | (static_cast<unsigned>(r[kLds]) << 16);
        const unsigned b1 = static_cast<unsigned>(r[8 * kLds]) | (static_cast<unsigned>(r[9 * kLds]) << 16);
        mma_16816(Tag{}, o[j], pa[kk], b0, b1);
      }
    }
    if (more) store_tile(cur ^ 1);
    __syncthreads();  // the next tile is in place; this one and the partials are free
  }

  // Row sums over the 4 lanes of each row.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int h = h0 + g + 8 * r;
    if (h >= p.H) continue;
    const std::size_t bh = static_cast<std::size_t>(b) * p.H + h;
    if (p.splits == 1) {
      const float inv = 1.0f / l[r];
#pragma unroll
      for (int j = 0; j < kONTiles; ++j) {
        const int col = warp * kColsPerWarp + j * 8 + 2 * t;
        *reinterpret_cast<unsigned*>(p.out + bh * kR + col) = pack2(Tag{}, o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
      }
    } else {
      float* dst = p.part + (bh * p.splits + split) * (kR + 2);
#pragma unroll
      for (int j = 0; j < kONTiles; ++j) {
        const int col = warp * kColsPerWarp + j * 8 + 2 * t;
        *reinterpret_cast<float2*>(dst + col) = make_float2(o[j][2 * r], o[j][2 * r + 1]);
      }
      if (warp == 0 && t == 0) {
        dst[kR] = m[r];
        dst[kR + 1] = l[r];
      }
    }
  }
}

// Combine the splits of one (sequence, head): out = sum_i 2^(m_i - M) o_i / sum_i 2^(m_i - M) l_i.
template <class Tag>
__global__ void __launch_bounds__(128) latent_reduce_kernel(const float* __restrict__ part, std::uint16_t* __restrict__ out,
                                                            int splits) {
  const std::size_t bh = blockIdx.x;
  const float* p = part + bh * splits * (kR + 2);
  float M = -INFINITY;
  for (int i = 0; i < splits; ++i) M = fmaxf(M, p[static_cast<std::size_t>(i) * (kR + 2) + kR]);
  float denom = 0.f;
  float acc[kR / 128] = {};
  for (int i = 0; i < splits; ++i) {
    const float* q = p + static_cast<std::size_t>(i) * (kR + 2);
    const float w = exp2f(q[kR] - M);
    denom = fmaf(w, q[kR + 1], denom);
#pragma unroll
    for (int c = 0; c < kR / 128; ++c) acc[c] = fmaf(w, q[threadIdx.x + c * 128], acc[c]);
  }
#pragma unroll
  for (int c = 0; c < kR / 128; ++c) out[bh * kR + threadIdx.x + c * 128] = encode<Tag>(acc[c] / denom);
}

}  // namespace

}  // namespace phasebench::cuda
