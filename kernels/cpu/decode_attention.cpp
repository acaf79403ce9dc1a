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
      // Softmax per query head.
      for (std::uint64_t j = 0; j < group; ++j) {
        float* sj = s.data() + j * L;
        const float mx = *std::max_element(sj, sj + L);
        float sum = 0.f;
        // Vectorised exp (glibc's libmvec; -fno-math-errno lets the compiler use it):
        // scalar expf over B*Hq*L scores would cost a fifth of the streaming time.
#pragma omp simd reduction(+ : sum)
        for (std::uint64_t l = 0; l < L; ++l) {
          sj[l] = std::exp(sj[l] - mx);
          sum += sj[l];
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (std::uint64_t l = 0; l < L; ++l) sj[l] *= inv;
      }
      // Pass 2: weighted sum of V rows.
      std::fill(acc.begin(), acc.end(), 0.f);
      for_each_row(v_all, b, h, [&](std::uint64_t l, const T* vrow) {
        const float* v = vf.data();
        if constexpr (sizeof(T) == 4)
          v = vrow;
        else
          decode_row(vrow, vf.data(), D);
        for (std::uint64_t j = 0; j < group; ++j) {
          const float p = s[j * L + l];
          float* aj = acc.data() + j * D;
#pragma omp simd
          for (std::uint64_t d = 0; d < D; ++d) aj[d] += p * v[d];
        }
      });
      for (std::uint64_t j = 0; j < group; ++j) {
        T* o = out_all + (b * a.Hq + h * group + j) * D;
        for (std::uint64_t d = 0; d < D; ++d) {
          if constexpr (sizeof(T) == 4)
            o[d] = acc[j * D + d];
          else
            o[d] = numeric::float_to_bf16(acc[j * D + d]);
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
