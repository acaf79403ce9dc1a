// Decode attention on the CPU. One task per (sequence, KV head): the Hq/Hkv
// query heads that share a KV head are handled together, so each K and V row is
// read from memory once for the whole group (GQA). Two streaming passes: K to
// scores, then V weighted by the softmax.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/numeric.hpp"
#include "cpu/cpu_kernels.hpp"
#include "cpu/simd.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cpu {

namespace {

template <class T>
inline void decode_row(const T* src, float* dst, std::uint64_t D) {
  if constexpr (sizeof(T) == 4) {
    for (std::uint64_t d = 0; d < D; ++d) dst[d] = src[d];
  } else {
#pragma omp simd
    for (std::uint64_t d = 0; d < D; ++d) dst[d] = numeric::bits_float(static_cast<std::uint32_t>(src[d]) << 16);
  }
}

// acc[j][d] += sum_l p[j][l] * v_l[d] for the `group` heads of one KV head.
template <class T>
void accumulate_pv(const T* const* vrows, const float* p, std::uint64_t L, std::uint64_t D, std::uint64_t group,
                   float* acc, float* scratch) {
#ifdef PB_CPU_AVX2
  if (D % 32 == 0) {
    constexpr std::uint64_t kBlock = 64;
    for (std::uint64_t l0 = 0; l0 < L; l0 += kBlock) {
      const std::uint64_t l1 = std::min(L, l0 + kBlock);
      for (std::uint64_t j0 = 0; j0 < group; j0 += 4) {
        const std::uint64_t nj = std::min<std::uint64_t>(4, group - j0);
        for (std::uint64_t d0 = 0; d0 < D; d0 += 32) {
          __m256 a[4][4];
          for (std::uint64_t jj = 0; jj < 4; ++jj)
            for (int c = 0; c < 4; ++c)
              a[jj][c] = jj < nj ? _mm256_loadu_ps(acc + (j0 + jj) * D + d0 + 8 * c) : _mm256_setzero_ps();
          for (std::uint64_t l = l0; l < l1; ++l) {
            const T* v = vrows[l] + d0;
            const __m256 v0 = simd::load8(v), v1 = simd::load8(v + 8), v2 = simd::load8(v + 16), v3 = simd::load8(v + 24);
            for (std::uint64_t jj = 0; jj < nj; ++jj) {
              const __m256 pj = _mm256_set1_ps(p[(j0 + jj) * L + l]);
              a[jj][0] = _mm256_fmadd_ps(pj, v0, a[jj][0]);
              a[jj][1] = _mm256_fmadd_ps(pj, v1, a[jj][1]);
              a[jj][2] = _mm256_fmadd_ps(pj, v2, a[jj][2]);
              a[jj][3] = _mm256_fmadd_ps(pj, v3, a[jj][3]);
            }
          }
          for (std::uint64_t jj = 0; jj < nj; ++jj)
            for (int c = 0; c < 4; ++c) _mm256_storeu_ps(acc + (j0 + jj) * D + d0 + 8 * c, a[jj][c]);
        }
      }
    }
    return;
  }
#endif
  for (std::uint64_t l = 0; l < L; ++l) {
    const float* v = scratch;
    if constexpr (sizeof(T) == 4)
      v = reinterpret_cast<const float*>(vrows[l]);
    else
      decode_row(vrows[l], scratch, D);
    for (std::uint64_t j = 0; j < group; ++j) {
      const float pj = p[j * L + l];
      float* aj = acc + j * D;
#pragma omp simd
      for (std::uint64_t d = 0; d < D; ++d) aj[d] += pj * v[d];
    }
  }
}

template <class T>
void run(const DecodeAttentionArgs& a) {
  const std::uint64_t group = a.Hq / a.Hkv, L = a.L, D = a.D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const T* q_all = static_cast<const T*>(a.q);
  const T* k_all = static_cast<const T*>(a.k);
  const T* v_all = static_cast<const T*>(a.v);
  T* out_all = static_cast<T*>(a.out);
  const bool paged = a.block_table != nullptr;
  // Visit the L rows of (b, h) in order: one run of L rows in the contiguous
  // cache [B,Hkv,L,D], one run per page in the paged pool [pages,Hkv,P,D]; the
  // block table is read once per page, never a division per token.
  auto for_each_row = [&](const T* base, std::uint64_t b, std::uint64_t h, auto&& fn) {
    if (!paged) {
      const T* p = base + (b * a.Hkv + h) * L * D;
      for (std::uint64_t l = 0; l < L; ++l) fn(l, p + l * D);
      return;
    }
    const std::uint64_t page_bytes = a.page_size * D * sizeof(T);
    for (std::uint64_t pg = 0, l0 = 0; l0 < L; ++pg, l0 += a.page_size) {
      const auto page = static_cast<std::uint64_t>(a.block_table[b * a.pages_per_seq + pg]);
      const T* p = base + (page * a.Hkv + h) * a.page_size * D;
      // Pages are scattered, so the hardware prefetcher loses the stream at every
      // page: ask for the next page while this one is processed.
      if (l0 + a.page_size < L) {
        const auto next = static_cast<std::uint64_t>(a.block_table[b * a.pages_per_seq + pg + 1]);
        const char* np = reinterpret_cast<const char*>(base + (next * a.Hkv + h) * a.page_size * D);
        for (std::uint64_t o = 0; o < page_bytes; o += 64) __builtin_prefetch(np + o, 0, 3);
      }
      const std::uint64_t n = std::min(a.page_size, L - l0);
      for (std::uint64_t t = 0; t < n; ++t) fn(l0 + t, p + t * D);
    }
  };
  const std::int64_t tasks = static_cast<std::int64_t>(a.B * a.Hkv);
#pragma omp parallel
  {
    std::vector<float> qf(group * D), s(group * L), vf(D), acc(group * D);
    std::vector<const T*> vrows;
    vrows.reserve(L);
    std::vector<float> inv_sum(group);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const std::uint64_t b = static_cast<std::uint64_t>(task) / a.Hkv, h = static_cast<std::uint64_t>(task) % a.Hkv;
      for (std::uint64_t j = 0; j < group; ++j)
        decode_row(q_all + (b * a.Hq + h * group + j) * D, qf.data() + j * D, D);
      // Pass 1: scores. Four query heads per K row load (dot4), the rest one by one.
      for_each_row(k_all, b, h, [&](std::uint64_t l, const T* k) {
        std::uint64_t j = 0;
        for (; j + 4 <= group; j += 4) {
          const float* q0 = qf.data() + j * D;
          float r[4];
          simd::dot4(k, q0, q0 + D, q0 + 2 * D, q0 + 3 * D, D, r);
          for (std::uint64_t i = 0; i < 4; ++i) s[(j + i) * L + l] = r[i] * scale;
        }
        for (; j < group; ++j) s[j * L + l] = simd::dot(k, qf.data() + j * D, D) * scale;
      });
      // Softmax per query head; the normalisation is applied to the outputs.
      for (std::uint64_t j = 0; j < group; ++j) {
        float* sj = s.data() + j * L;
        const float mx = *std::max_element(sj, sj + L);
        inv_sum[j] = 1.0f / simd::exp_shift_sum(sj, L, mx);
      }
      // Pass 2: weighted sum of V rows, over blocks of 64 tokens so that the
      // accumulators of up to four heads x 32 columns stay in registers while
      // the block's V rows stream through (an accumulator array updated in
      // memory per row would be bound by the stores).
      std::fill(acc.begin(), acc.end(), 0.f);
      vrows.clear();
      for_each_row(v_all, b, h, [&](std::uint64_t, const T* vrow) { vrows.push_back(vrow); });
      accumulate_pv(vrows.data(), s.data(), L, D, group, acc.data(), vf.data());
      for (std::uint64_t j = 0; j < group; ++j) {
        T* o = out_all + (b * a.Hq + h * group + j) * D;
        for (std::uint64_t d = 0; d < D; ++d) {
          if constexpr (sizeof(T) == 4)
            o[d] = acc[j * D + d] * inv_sum[j];
          else
            o[d] = numeric::float_to_bf16(acc[j * D + d] * inv_sum[j]);
        }
      }
    }
  }
}

// fp16 goes through the same loops with fp16 decode/encode.
void run_fp16(const DecodeAttentionArgs& a) {
  // Convert q, K and V rows on the fly; fp16 is the slow path on CPUs without
  // native half arithmetic, kept for completeness rather than speed.
  const std::uint64_t group = a.Hq / a.Hkv, L = a.L, D = a.D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const auto* q_all = static_cast<const std::uint16_t*>(a.q);
  const auto* k_all = static_cast<const std::uint16_t*>(a.k);
  const auto* v_all = static_cast<const std::uint16_t*>(a.v);
  auto* out_all = static_cast<std::uint16_t*>(a.out);
  const bool paged = a.block_table != nullptr;
  auto row = [&](const std::uint16_t* base, std::uint64_t b, std::uint64_t h, std::uint64_t l) {
    if (!paged) return base + ((b * a.Hkv + h) * L + l) * D;
    const auto page = static_cast<std::uint64_t>(a.block_table[b * a.pages_per_seq + l / a.page_size]);
    return base + ((page * a.Hkv + h) * a.page_size + l % a.page_size) * D;
  };
  const std::int64_t tasks = static_cast<std::int64_t>(a.B * a.Hkv);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::uint64_t b = static_cast<std::uint64_t>(task) / a.Hkv, h = static_cast<std::uint64_t>(task) % a.Hkv;
    for (std::uint64_t j = 0; j < group; ++j) {
      const std::uint16_t* q = q_all + (b * a.Hq + h * group + j) * D;
      std::vector<float> s(L), acc(D, 0.f);
      float mx = -INFINITY;
      for (std::uint64_t l = 0; l < L; ++l) {
        const std::uint16_t* k = row(k_all, b, h, l);
        float dot = 0.f;
        for (std::uint64_t d = 0; d < D; ++d) dot += numeric::fp16_to_float(q[d]) * numeric::fp16_to_float(k[d]);
        s[l] = dot * scale;
        mx = std::max(mx, s[l]);
      }
      float sum = 0.f;
      for (auto& x : s) {
        x = std::exp(x - mx);
        sum += x;
      }
      for (std::uint64_t l = 0; l < L; ++l) {
        const std::uint16_t* v = row(v_all, b, h, l);
        for (std::uint64_t d = 0; d < D; ++d) acc[d] += s[l] * numeric::fp16_to_float(v[d]);
      }
      std::uint16_t* o = out_all + (b * a.Hq + h * group + j) * D;
      for (std::uint64_t d = 0; d < D; ++d) o[d] = numeric::float_to_fp16(acc[d] / sum);
    }
  }
}

}  // namespace

void decode_attention(const DecodeAttentionArgs& a) {
  if (a.Hkv == 0 || a.Hq % a.Hkv != 0) throw Unsupported("decode attention needs Hq to be a multiple of Hkv");
  if (a.L == 0) throw Unsupported("decode attention needs a context of at least one token");
  switch (a.t) {
    case DType::fp32: run<float>(a); break;
    case DType::bf16: run<std::uint16_t>(a); break;
    case DType::fp16: run_fp16(a); break;
    default: throw Unsupported("CPU decode attention supports fp32, bf16 and fp16");
  }
}

}  // namespace phasebench::cpu
