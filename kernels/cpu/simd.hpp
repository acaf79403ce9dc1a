#pragma once
// Inner loops of the CPU kernels. A plain `omp simd` reduction keeps one vector
// accumulator, so it is bound by the FMA latency (8 floats per 4 cycles), well
// under what two cores can stream; these keep four accumulators in flight.
// AVX2+FMA when the compiler targets it (-march=native), portable loops otherwise.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define PB_CPU_AVX2 1
#endif

namespace phasebench::cpu::simd {

// An fp8 e4m3 element (OCP "fn": no infinities), a type of its own so the loads
// below overload on it. Decoded by placing its 7 magnitude bits at the bottom
// of an fp32 exponent and the top of its mantissa and multiplying by 2^120 (the
// bias difference 127 - 7): exact for normal and subnormal values alike.
struct Fp8E4M3 {
  std::uint8_t bits;
};
inline constexpr float kFp8E4M3Rebias = 1.329227995784916e36f;  // 2^120

#ifdef PB_CPU_AVX2
inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}
// Keeps a loaded vector in a register: without it GCC folds the load into every
// FMA that uses it, so a row reused by four heads is loaded four times and the
// loop becomes bound by the load ports instead of the FMA units.
inline void keep_in_register(__m256& v) { __asm__("" : "+x"(v)); }
// Eight horizontal sums at once: lane i of the result is the sum of a[i]'s
// lanes (six hadds and two lane swaps instead of eight separate reductions).
inline __m256 hsum8(const __m256 a[8]) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  // u0 = [a0..a3 over lanes 0-3 | a0..a3 over lanes 4-7], u1 the same for a4..a7.
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
// 8 bf16 -> 8 floats: widen to 32 bits and shift into the high half.
inline __m256 load_bf16(const std::uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const std::uint16_t* p) { return load_bf16(p); }
// 8 fp8 e4m3 -> 8 floats.
inline __m256 load8(const Fp8E4M3* p) {
  std::uint64_t raw;
  std::memcpy(&raw, p, 8);
  const __m256i b = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(raw)));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
  const __m256i mag = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7f)), 20);
  return _mm256_mul_ps(_mm256_castsi256_ps(_mm256_or_si256(sign, mag)), _mm256_set1_ps(kFp8E4M3Rebias));
}

// exp of 8 floats (Cephes' expf polynomial after range reduction by ln 2;
// about 1 ulp). Inputs below -87.3 give the smallest normal float, not 0.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)), _mm256_set1_ps(-87.3365447504f));
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(n));
}
#endif

// Largest of p[0..n-1] (n >= 1).
inline float max_of(const float* p, std::uint64_t n) {
  std::uint64_t i = 0;
  float m = p[0];
#ifdef PB_CPU_AVX2
  if (n >= 8) {
    __m256 m0 = _mm256_loadu_ps(p), m1 = m0, m2 = m0, m3 = m0;
    for (; i + 32 <= n; i += 32) {
      m0 = _mm256_max_ps(m0, _mm256_loadu_ps(p + i));
      m1 = _mm256_max_ps(m1, _mm256_loadu_ps(p + i + 8));
      m2 = _mm256_max_ps(m2, _mm256_loadu_ps(p + i + 16));
      m3 = _mm256_max_ps(m3, _mm256_loadu_ps(p + i + 24));
    }
    for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(p + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    for (float x : lanes) m = std::max(m, x);
  }
#endif
  for (; i < n; ++i) m = std::max(m, p[i]);
  return m;
}

// p[i] = exp(p[i] - mx) for i < n; returns the sum of the results.
inline float exp_shift_sum(float* p, std::uint64_t n, float mx) {
  std::uint64_t i = 0;
  float sum = 0.f;
#ifdef PB_CPU_AVX2
  __m256 acc = _mm256_setzero_ps();
  const __m256 m = _mm256_set1_ps(mx);
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p + i), m));
    _mm256_storeu_ps(p + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  sum = hsum(acc);
#endif
  for (; i < n; ++i) {
    p[i] = std::exp(p[i] - mx);
    sum += p[i];
  }
  return sum;
}

inline float scalar(float v) { return v; }
inline float scalar(Fp8E4M3 x) {
  const std::uint32_t u = (static_cast<std::uint32_t>(x.bits & 0x80u) << 24) | (static_cast<std::uint32_t>(x.bits & 0x7fu) << 20);
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f * kFp8E4M3Rebias;
}
inline float scalar(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// sum_k w[k] * x[k]; W is fp32, bf16 (uint16_t) or fp8 e4m3, x fp32.
template <class WT>
inline float dot(const WT* w, const float* x, std::uint64_t K) {
  std::uint64_t k = 0;
  float r = 0.f;
#ifdef PB_CPU_AVX2
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (; k + 32 <= K; k += 32) {
    a0 = _mm256_fmadd_ps(load8(w + k), load8(x + k), a0);
    a1 = _mm256_fmadd_ps(load8(w + k + 8), load8(x + k + 8), a1);
    a2 = _mm256_fmadd_ps(load8(w + k + 16), load8(x + k + 16), a2);
    a3 = _mm256_fmadd_ps(load8(w + k + 24), load8(x + k + 24), a3);
  }
  for (; k + 8 <= K; k += 8) a0 = _mm256_fmadd_ps(load8(w + k), load8(x + k), a0);
  r = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
#endif
  for (; k < K; ++k) r += scalar(w[k]) * x[k];
  return r;
}

// Four dot products of one weight row with four x rows: each weight vector
// loaded once feeds four FMAs (four independent accumulators).
template <class WT>
inline void dot4(const WT* w, const float* x0, const float* x1, const float* x2, const float* x3, std::uint64_t K,
                 float out[4]) {
  std::uint64_t k = 0;
  float r0 = 0.f, r1 = 0.f, r2 = 0.f, r3 = 0.f;
#ifdef PB_CPU_AVX2
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (; k + 8 <= K; k += 8) {
    const __m256 wv = load8(w + k);
    a0 = _mm256_fmadd_ps(wv, load8(x0 + k), a0);
    a1 = _mm256_fmadd_ps(wv, load8(x1 + k), a1);
    a2 = _mm256_fmadd_ps(wv, load8(x2 + k), a2);
    a3 = _mm256_fmadd_ps(wv, load8(x3 + k), a3);
  }
  r0 = hsum(a0);
  r1 = hsum(a1);
  r2 = hsum(a2);
  r3 = hsum(a3);
#endif
  for (; k < K; ++k) {
    const float wk = scalar(w[k]);
    r0 += wk * x0[k];
    r1 += wk * x1[k];
    r2 += wk * x2[k];
    r3 += wk * x3[k];
  }
  out[0] = r0;
  out[1] = r1;
  out[2] = r2;
  out[3] = r3;
}

}  // namespace phasebench::cpu::simd
