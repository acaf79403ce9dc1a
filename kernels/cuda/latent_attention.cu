// MLA decode attention on CUDA (latent_attention.hpp), absorbed form,
// and its operations (decode_latent_attention, decode_latent_attention_paged)
// verified against reference::latent_attention_head.
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
#include "cuda/latent_attention.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "common/paged_kv.hpp"
#include "reference/common.hpp"
#include "reference/decode_latent_attention.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/attention_util.cuh"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/ptx.cuh"
#include "phasebench/error.hpp"
#include "phasebench/ops/latent_attention.hpp"

namespace phasebench::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kR = 512, kP = 64, kW = kR + kP;  // latent width
constexpr int kHeads = 16;                      // heads per CTA: the MMA's M
constexpr int kTokens = 32;                     // latent rows per tile
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


struct LatentParams {
  const std::uint16_t* q;      // [B, H, 576]
  std::uint16_t* out;          // [B, H, 512]
  const std::uint16_t* cache;  // [B, L, 576] or pages [pages, page_size, 576]
  const std::int32_t* block_table;  // paged: [B, pages_per_seq]
  float* part;                 // splits > 1: [B * H][splits][512 + 2]
  int H, L, page_size, pages_per_seq, chunk, splits;
  float scale_log2;            // softmax scale * log2(e)
};

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

template <class F>
void dispatch(DType dtype, bool paged, F&& f) {
  auto by_paged = [&](auto tag) {
    if (paged)
      f(tag, std::true_type{});
    else
      f(tag, std::false_type{});
  };
  if (dtype == DType::bf16)
    by_paged(Bf16Tag{});
  else if (dtype == DType::fp16)
    by_paged(Fp16Tag{});
  else
    throw Unsupported("CUDA MLA decode attention takes bf16 or fp16");
}

// The kernel's dynamic shared memory (above 48 KiB) is allowed once per instantiation.
template <class Tag, bool Paged>
void allow_smem() {
  static bool done = false;
  if (done) return;
  PB_CUDA_CHECK(cudaFuncSetAttribute(latent_attention_kernel<Tag, Paged>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kSmemBytes)));
  done = true;
}

struct Launch {
  LatentParams p;
  int B = 0;
  int head_tiles = 0;
};

void launch(DType dtype, bool paged, const Launch& l, cudaStream_t stream) {
  dispatch(dtype, paged, [&](auto tag, auto pg) {
    using Tag = decltype(tag);
    constexpr bool Pg = decltype(pg)::value;
    allow_smem<Tag, Pg>();
    const dim3 grid(static_cast<unsigned>(l.head_tiles), static_cast<unsigned>(l.p.splits), static_cast<unsigned>(l.B));
    latent_attention_kernel<Tag, Pg><<<grid, kThreads, kSmemBytes, stream>>>(l.p);
    PB_CUDA_CHECK_LAUNCH("latent_attention_kernel");
    if (l.p.splits > 1) {
      latent_reduce_kernel<Tag><<<static_cast<unsigned>(l.B * l.p.H), 128, 0, stream>>>(l.p.part, l.p.out, l.p.splits);
      PB_CUDA_CHECK_LAUNCH("latent_reduce_kernel");
    }
  });
}

}  // namespace

std::optional<std::string> latent_attention_unsupported(DType dtype, long long H, long long R, long long P) {
  if (dtype != DType::bf16 && dtype != DType::fp16)
    return "CUDA MLA decode attention takes bf16 or fp16, not " + std::string(to_string(dtype));
  if (R != kR || P != kP)
    return "CUDA MLA decode attention supports kv_lora_rank 512 with qk_rope_head_dim 64 (DeepSeek-V2/V3); got R=" +
           std::to_string(R) + " P=" + std::to_string(P);
  if (H < 1 || (H + kHeads - 1) / kHeads > 65535) return "CUDA MLA decode attention: heads must be 1 to 65535*16";
  return std::nullopt;
}

int latent_min_chunk(int H) { return std::max(256, 16 * H); }

int latent_attention_ctas_per_sm(DType dtype, bool paged) {
  int n = 0;
  dispatch(dtype, paged, [&](auto tag, auto pg) {
    using Tag = decltype(tag);
    constexpr bool Pg = decltype(pg)::value;
    allow_smem<Tag, Pg>();
    PB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, latent_attention_kernel<Tag, Pg>, kThreads, kSmemBytes));
  });
  return std::max(n, 1);
}

LatentSplitPlan plan_latent_splits(int B, int H, int L, std::uint64_t requested, int sm_count, int ctas_per_sm) {
  LatentSplitPlan plan;
  long long splits = 1;
  if (requested == 0) {
    const long long base = static_cast<long long>(B) * ((H + kHeads - 1) / kHeads);
    const long long wave = static_cast<long long>(std::max(sm_count, 1)) * std::max(ctas_per_sm, 1);
    // A batch that fills 3/4 of a wave already keeps the GPU busy: splitting it
    // would only add the partial results' traffic and a reduction. Otherwise the
    // fewest splits whose CTAs (all of the same work) fill their waves within 2%
    // of the best:
    // 576 CTAs on 264 slots run in 3 waves, the last 18% full, where 512 run in
    // two full ones.
    if (4 * base < 3 * wave) {
      const long long most = std::min<long long>(std::max(1, L / latent_min_chunk(H)), kMaxLatentSplits);
      auto filled = [&](long long s) {
        const long long ctas = base * s;
        return static_cast<double>(ctas) / static_cast<double>((ctas + wave - 1) / wave * wave);
      };
      double best = 0;
      for (long long s = 1; s <= most; ++s) best = std::max(best, filled(s));
      while (filled(splits) < 0.98 * best) ++splits;  // the fewest within 2% of the best
    }
  } else {
    splits = static_cast<long long>(std::min<std::uint64_t>({requested, static_cast<std::uint64_t>(L),
                                                             static_cast<std::uint64_t>(kMaxLatentSplits)}));
  }
  // Chunks of whole tiles (except the last), then as many splits as they make.
  long long chunk = (L + splits - 1) / splits;
  chunk = (chunk + kTokens - 1) / kTokens * kTokens;
  plan.chunk = static_cast<int>(std::max<long long>(chunk, 1));
  plan.splits = static_cast<int>((L + plan.chunk - 1) / plan.chunk);
  plan.workspace_floats =
      plan.splits > 1 ? static_cast<std::size_t>(B) * H * plan.splits * (kR + 2) : std::size_t{0};
  return plan;
}

// ---- the operation ----------------------------------------------------------------

namespace {

LatentSplitPlan split_plan(const Context& ctx, const OpRequest& r) {
  const auto s = LatentAttentionShape::of(r.shape);
  return plan_latent_splits(static_cast<int>(s.B), static_cast<int>(s.H), static_cast<int>(s.L),
                            r.params.get("splits", 0), ctx.sm_count,
                            latent_attention_ctas_per_sm(r.dtype, r.kind == kDecodeLatentAttentionPaged));
}

std::optional<std::string> request_unsupported(const OpRequest& r, const Context& ctx) {
  const auto s = LatentAttentionShape::of(r.shape);
  if (auto why = shared_memory_unsupported("MLA decode attention", kSmemBytes, ctx)) return why;
  if (auto why = latent_attention_unsupported(r.dtype, static_cast<long long>(s.H), static_cast<long long>(s.R),
                                              static_cast<long long>(s.P)))
    return why;
  if (s.B == 0 || s.L == 0) return std::string("MLA decode attention: batch and context must be >= 1");
  if (s.B > 65535) return "MLA decode attention: batch " + std::to_string(s.B) + " exceeds 65535 (a grid dimension)";
  if (s.L > static_cast<std::uint64_t>(INT_MAX) || s.H > static_cast<std::uint64_t>(INT_MAX))
    return std::string("MLA decode attention: context and heads must fit in 32 bits");
  if (r.params.get("splits", 0) > static_cast<std::uint64_t>(kMaxLatentSplits))
    return "MLA decode attention: " + std::to_string(r.params["splits"]) + " splits requested; at most " +
           std::to_string(kMaxLatentSplits);
  if (r.kind == kDecodeLatentAttentionPaged &&
      (s.B * pages_per_sequence(s.L, r.params["page_size"]) > static_cast<std::uint64_t>(INT_MAX) ||
       r.params["page_size"] > static_cast<std::uint64_t>(INT_MAX)))
    return std::string("MLA decode attention (paged): more than 2^31 pages");
  return std::nullopt;
}

class LatentAttentionOp final : public PreparedOp, public AttentionOpAccess {
 public:
  LatentAttentionOp(Context& ctx, const OpRequest& r) : ctx_(ctx), r_(r), paged_(r.kind == kDecodeLatentAttentionPaged) {
    const auto s = LatentAttentionShape::of(r.shape);
    B_ = static_cast<int>(s.B);  // cannot_run checked that every dimension fits
    H_ = static_cast<int>(s.H);
    L_ = static_cast<int>(s.L);
    const std::size_t es = element_bytes(r.dtype);
    const std::size_t q_elems = static_cast<std::size_t>(B_) * H_ * kW;
    std::size_t cache_elems = static_cast<std::size_t>(B_) * L_ * kW;
    if (paged_) {
      pool_ = BlockTable(r, B_, s.L);
      cache_elems = static_cast<std::size_t>(B_) * pool_.pages_per_seq * pool_.page_size * kW;
    }
    const LatentSplitPlan plan = split_plan(ctx, r);
    q_ = DeviceBuffer(q_elems * es);
    out_ = DeviceBuffer(static_cast<std::size_t>(B_) * H_ * kR * es);
    cache_ = DeviceBuffer(cache_elems * es);
    if (plan.workspace_floats) ws_ = DeviceBuffer(plan.workspace_floats * sizeof(float));
    fill_random(q_.get(), r.dtype, q_elems, seed_of(r.seed, KvBuf::q), 1.0f, ctx.stream);
    PB_CUDA_CHECK(cudaMemsetAsync(out_.get(), 0, out_.bytes(), ctx.stream));
    if (paged_) {
      pool_.to_device(ctx.stream);
      // Slots past L in each sequence's last page hold unrelated non-zero data (read by nobody).
      fill_random(cache_.get(), r.dtype, cache_elems, seed_of(r.seed, KvBuf::k_pool), 1.0f, ctx.stream);
      paged_logical_fill(cache_.get(), pool_.table(), r.dtype, seed_of(r.seed, KvBuf::k), B_, 1, L_, kW, pool_.page_size,
                         pool_.pages_per_seq, ctx.stream);
    } else {
      fill_random(cache_.get(), r.dtype, cache_elems, seed_of(r.seed, KvBuf::k), 1.0f, ctx.stream);
    }
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    l_.B = B_;
    l_.head_tiles = (H_ + kHeads - 1) / kHeads;
    l_.p.q = q_.as<std::uint16_t>();
    l_.p.out = out_.as<std::uint16_t>();
    l_.p.cache = cache_.as<std::uint16_t>();
    l_.p.block_table = paged_ ? pool_.table() : nullptr;
    l_.p.part = plan.workspace_floats ? ws_.as<float>() : nullptr;
    l_.p.H = H_;
    l_.p.L = L_;
    l_.p.page_size = pool_.page_size;
    l_.p.pages_per_seq = pool_.pages_per_seq;
    l_.p.chunk = plan.chunk;
    l_.p.splits = plan.splits;
    l_.p.scale_log2 = static_cast<float>(1.4426950408889634 * latent_attention_scale(r));
  }

  void run() override { launch(r_.dtype, paged_, l_, ctx_.stream); }

  void verify() override {
    run();
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    corrupt_for_test(fault_, out_.get(), out_.bytes(), ctx_.stream);
    const DType t = r_.dtype;
    const std::size_t es = element_bytes(t), L = static_cast<std::size_t>(L_);
    const std::vector<float> q = download_as_float(q_.get(), t, static_cast<std::size_t>(B_) * H_ * kW, ctx_.stream);
    const std::vector<float> out = download_as_float(out_.get(), t, static_cast<std::size_t>(B_) * H_ * kR, ctx_.stream);
    // Sequences: a spread incl. the first and the last, fewer at long contexts
    // (about 2^27 reference multiply-adds); heads: all up to 24, else a spread
    // incl. the first and the last (so the masked last tile is checked).
    const auto heads = spread_sample(static_cast<std::uint64_t>(H_), 24);
    const std::uint64_t per_seq = heads.size() * L * kW;
    const auto seqs = spread_sample(static_cast<std::uint64_t>(B_),
                                    std::max<std::uint64_t>(2, (std::uint64_t{1} << 27) / std::max<std::uint64_t>(per_seq, 1)));
    const float scale = latent_attention_scale(r_);
    std::vector<unsigned char> raw(L * kW * es);
    std::vector<double> ref(kR);
    for (const std::uint64_t b : seqs) {
      if (!paged_) {
        PB_CUDA_CHECK(cudaMemcpyAsync(raw.data(), byte_ptr(cache_.get(), b * L * kW, es), L * kW * es,
                                      cudaMemcpyDeviceToHost, ctx_.stream));
      } else {
        const std::size_t P = static_cast<std::size_t>(pool_.page_size);
        for (std::size_t lp = 0; lp < static_cast<std::size_t>(pool_.pages_per_seq); ++lp) {
          const std::size_t page = static_cast<std::size_t>(pool_.host[b * pool_.pages_per_seq + lp]);
          const std::size_t tokens = std::min(P, L - lp * P);
          PB_CUDA_CHECK(cudaMemcpyAsync(raw.data() + lp * P * kW * es, byte_ptr(cache_.get(), page * P * kW, es),
                                        tokens * kW * es, cudaMemcpyDeviceToHost, ctx_.stream));
        }
      }
      PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
      const std::vector<float> C = reference::to_float(raw.data(), t, L * kW);
      for (const std::uint64_t h : heads) {
        const std::size_t bh = b * H_ + h;
        reference::latent_attention_head(q.data() + bh * kW, L, kR, kP, scale,
                                         [&](std::size_t l) { return C.data() + l * kW; }, ref.data());
        const std::vector<float> got(out.begin() + static_cast<std::ptrdiff_t>(bh * kR),
                                     out.begin() + static_cast<std::ptrdiff_t>((bh + 1) * kR));
        reference::check_rows_close(got, ref, kR, reference::tolerance_for(t),
                                    shape() + ", batch " + std::to_string(b) + ", head " + std::to_string(h) +
                                        " (elements are latent columns)");
      }
    }
  }

  std::vector<float> output_values() override { return output_as_float(); }
  std::vector<float> output_as_float() override {
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return download_as_float(out_.get(), r_.dtype, static_cast<std::size_t>(B_) * H_ * kR, ctx_.stream);
  }
  void set_fault_injection(bool on) override { fault_ = on; }
  int splits() const override { return l_.p.splits; }

 private:
  std::string shape() const {
    std::ostringstream os;
    os << (paged_ ? "MLA decode attention (paged)" : "MLA decode attention") << " " << to_string(r_.dtype)
       << " B=" << B_ << " H=" << H_ << " L=" << L_ << " R=" << kR << " P=" << kP;
    if (paged_) os << " page_size=" << pool_.page_size;
    os << " splits=" << l_.p.splits;
    return os.str();
  }

  Context& ctx_;
  OpRequest r_;
  bool paged_;
  bool fault_ = false;
  int B_ = 0, H_ = 0, L_ = 0;
  DeviceBuffer q_, out_, cache_, ws_;
  BlockTable pool_;  // paged only
  Launch l_;
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(latent_attention) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  add_contiguous_and_paged<LatentAttentionOp>(registry, kDecodeLatentAttention, kDecodeLatentAttentionPaged,
                                              request_unsupported, split_workspace_bytes<split_plan>);
}
