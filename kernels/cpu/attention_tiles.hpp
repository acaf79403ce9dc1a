#pragma once
// Register-tiled inner loops of the CPU attention kernels (decode and prefill):
// scores of a few query rows against a block of key rows, and the
// probability-weighted sum of a block of value rows, with software prefetch of
// another block spread over the work. Query rows are D floats apart; key and
// value rows `rs` elements apart (D in a [.., L, D] cache, Hkv*D in a prompt's
// [S, Hkv, D] layout).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cpu/simd.hpp"

namespace phasebench::cpu::attention_tiles {

// Software prefetch of the next block, spread over the processing of the
// current one: a few lines per tile keep misses in flight while the core
// computes (the hardware prefetcher alone leaves compute and memory mostly
// serialised, and loses the stream at every jump between pages), where a burst
// of a whole block at once would fill the miss queue and stall until it drains.
struct Prefetcher {
  const char* p = nullptr;
  std::uint64_t left = 0;
  [[gnu::always_inline]] void step(std::uint64_t bytes) {
    bytes = std::min(bytes, left);
    for (std::uint64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
    p += bytes;
    left -= bytes;
  }
};

template <class T>
inline float to_float(T x) {
  if constexpr (sizeof(T) == 4)
    return x;
  else
    return simd::scalar(x);
}

#ifdef PB_CPU_AVX2
// s[h*ls + t] = scale * <q_h, k_t> for NH query rows (q_h at q + h*D) and NT
// key rows (k_t at k + t*rs), NH*NT = 8: eight accumulators, summed
// horizontally all at once.
template <int NH, int NT, class T>
[[gnu::always_inline]] inline void scores_tile(const T* k, std::uint64_t rs, const float* q, std::uint64_t D, float scale,
                                               float* s, std::uint64_t ls) {
  static_assert(NH * NT == 8);
  __m256 acc[8];
  for (auto& x : acc) x = _mm256_setzero_ps();
  for (std::uint64_t d = 0; d < D; d += 8) {
    __m256 qv[NH];
    for (int h = 0; h < NH; ++h) {
      qv[h] = _mm256_loadu_ps(q + h * D + d);
      simd::keep_in_register(qv[h]);
    }
    for (int t = 0; t < NT; ++t) {
      __m256 kv = simd::load8(k + t * rs + d);
      simd::keep_in_register(kv);
      for (int h = 0; h < NH; ++h) acc[h * NT + t] = _mm256_fmadd_ps(kv, qv[h], acc[h * NT + t]);
    }
  }
  alignas(32) float r[8];
  _mm256_store_ps(r, _mm256_mul_ps(simd::hsum8(acc), _mm256_set1_ps(scale)));
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < NT; ++t) s[h * ls + t] = r[h * NT + t];
}

// Scores of NH query rows against n key rows, NT = 8/NH rows per tile;
// `pf` advances by the bytes of the rows each tile consumes.
template <int NH, class T>
[[gnu::always_inline]] inline void scores_heads(const T* k, std::uint64_t rs, std::uint64_t n, const float* q,
                                                std::uint64_t D, float scale, float* s, std::uint64_t ls,
                                                Prefetcher& pf) {
  constexpr int NT = 8 / NH;
  std::uint64_t t = 0;
  for (; t + NT <= n; t += NT) {
    pf.step(NT * D * sizeof(T));
    scores_tile<NH, NT>(k + t * rs, rs, q, D, scale, s + t, ls);
  }
  for (; t < n; ++t)
    for (int h = 0; h < NH; ++h) s[h * ls + t] = simd::dot(k + t * rs, q + h * D, D) * scale;
}

// acc[h*D + c] += sum_t p[h*lp + t] * v_t[c] for NH query rows and 16 columns
// (v_t at v + t*rs; the caller offsets v and acc to the column). U = 4/NH
// partial sums over alternate rows keep eight independent FMA chains whatever NH is.
template <int NH, class T>
[[gnu::always_inline]] inline void pv_tile(const T* v, std::uint64_t rs, std::uint64_t n, std::uint64_t D, const float* p,
                                           std::uint64_t lp, float* acc) {
  constexpr int U = 4 / NH;
  __m256 a[NH][U][2];
  for (int h = 0; h < NH; ++h)
    for (int u = 0; u < U; ++u) a[h][u][0] = a[h][u][1] = _mm256_setzero_ps();
  std::uint64_t t = 0;
  for (; t + U <= n; t += U)
    for (int u = 0; u < U; ++u) {
      __m256 v0 = simd::load8(v + (t + u) * rs), v1 = simd::load8(v + (t + u) * rs + 8);
      simd::keep_in_register(v0);
      simd::keep_in_register(v1);
      for (int h = 0; h < NH; ++h) {
        const __m256 ph = _mm256_broadcast_ss(p + h * lp + t + u);
        a[h][u][0] = _mm256_fmadd_ps(ph, v0, a[h][u][0]);
        a[h][u][1] = _mm256_fmadd_ps(ph, v1, a[h][u][1]);
      }
    }
  for (; t < n; ++t) {
    const __m256 v0 = simd::load8(v + t * rs), v1 = simd::load8(v + t * rs + 8);
    for (int h = 0; h < NH; ++h) {
      const __m256 ph = _mm256_broadcast_ss(p + h * lp + t);
      a[h][0][0] = _mm256_fmadd_ps(ph, v0, a[h][0][0]);
      a[h][0][1] = _mm256_fmadd_ps(ph, v1, a[h][0][1]);
    }
  }
  for (int h = 0; h < NH; ++h) {
    __m256 lo = a[h][0][0], hi = a[h][0][1];
    for (int u = 1; u < U; ++u) {
      lo = _mm256_add_ps(lo, a[h][u][0]);
      hi = _mm256_add_ps(hi, a[h][u][1]);
    }
    float* o = acc + h * D;
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), lo));
    _mm256_storeu_ps(o + 8, _mm256_add_ps(_mm256_loadu_ps(o + 8), hi));
  }
}

// The block's rows are taken kPvRows at a time across all columns: a tile
// then touches a few lines of a few rows, and the block is read nearly in
// memory order. Tiles over all of a block's rows touch one line of every row
// at once, which left P*V 15-25% slower than the scores pass out of memory.
inline constexpr std::uint64_t kPvRows = 4;

template <int NH, class T>
[[gnu::always_inline]] inline void pv_heads(const T* v, std::uint64_t rs, std::uint64_t n, std::uint64_t D, const float* p,
                                            std::uint64_t lp, float* acc, Prefetcher& pf) {
  for (std::uint64_t t = 0; t < n; t += kPvRows) {
    const std::uint64_t m = std::min(kPvRows, n - t);
    const std::uint64_t per_tile = (m * D * sizeof(T) / (D / 16) + 63) / 64 * 64;
    for (std::uint64_t c = 0; c < D; c += 16) {
      pf.step(per_tile);
      pv_tile<NH>(v + t * rs + c, rs, m, D, p + t, lp, acc + c);
    }
  }
}

// fn(std::integral_constant<int, NH>, j) for the group's query heads in tiles
// of NH = 4, then 2, then 1 heads starting at head j.
template <class Fn>
inline void for_each_head_tile(std::uint64_t group, Fn&& fn) {
  std::uint64_t j = 0;
  for (; j + 4 <= group; j += 4) fn(std::integral_constant<int, 4>{}, j);
  if (j + 2 <= group) {
    fn(std::integral_constant<int, 2>{}, j);
    j += 2;
  }
  if (j < group) fn(std::integral_constant<int, 1>{}, j);
}
#endif

// s[j*ls + t] = scale * <q_j, k_t>: scores of n key rows (k_t at k + t*rs) for
// `group` query rows (q_j at q + j*D); pf: a block to prefetch meanwhile.
template <class T>
void block_scores(const T* k, std::uint64_t rs, std::uint64_t n, const float* q, std::uint64_t group, std::uint64_t D,
                  float scale, float* s, std::uint64_t ls, Prefetcher pf) {
#ifdef PB_CPU_AVX2
  if (D % 8 == 0) {
    for_each_head_tile(group, [&](auto nh, std::uint64_t j) {
      scores_heads<decltype(nh)::value>(k, rs, n, q + j * D, D, scale, s + j * ls, ls, pf);
    });
    pf.step(pf.left);
    return;
  }
#endif
  pf.step(pf.left);
  for (std::uint64_t t = 0; t < n; ++t)
    for (std::uint64_t j = 0; j < group; ++j) {
      float dot = 0.f;
      for (std::uint64_t d = 0; d < D; ++d) dot += to_float(k[t * rs + d]) * q[j * D + d];
      s[j * ls + t] = dot * scale;
    }
}

// acc[j*D + c] += sum over n value rows (v_t at v + t*rs) of p[j*lp + t] * v_t[c].
template <class T>
void block_pv(const T* v, std::uint64_t rs, std::uint64_t n, const float* p, std::uint64_t lp, std::uint64_t group,
              std::uint64_t D, float* acc, Prefetcher pf) {
#ifdef PB_CPU_AVX2
  if (D % 16 == 0) {
    for_each_head_tile(group, [&](auto nh, std::uint64_t j) {
      pv_heads<decltype(nh)::value>(v, rs, n, D, p + j * lp, lp, acc + j * D, pf);
    });
    pf.step(pf.left);
    return;
  }
#endif
  pf.step(pf.left);
  for (std::uint64_t t = 0; t < n; ++t)
    for (std::uint64_t j = 0; j < group; ++j) {
      const float pj = p[j * lp + t];
      for (std::uint64_t d = 0; d < D; ++d) acc[j * D + d] += pj * to_float(v[t * rs + d]);
    }
}

}  // namespace phasebench::cpu::attention_tiles
