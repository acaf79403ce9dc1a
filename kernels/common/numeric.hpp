#pragma once
// Element conversions and the deterministic random fill, shared by host and
// device code (no CUDA types: PB_HD expands to __host__ __device__ under nvcc).
// Conversions round to nearest even, bit-exact on both sides, so a host can
// regenerate exactly what a device filled.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PB_HD __host__ __device__ __forceinline__
#else
#define PB_HD inline
#endif

namespace phasebench::numeric {

PB_HD std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

PB_HD float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

PB_HD float bf16_to_float(std::uint16_t b) { return bits_float(static_cast<std::uint32_t>(b) << 16); }

PB_HD std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

PB_HD float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    // subnormal: value = man * 2^-24
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

PB_HD std::uint16_t float_to_fp16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);
  if (au >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (au < 0x38800000u) {                                                   // subnormal or zero in fp16
    const float a = bits_float(au);
    // value in units of 2^-24, rounded to nearest even
    const float scaled = a * 16777216.0f;
    std::uint32_t q = static_cast<std::uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  std::uint32_t r = au + 0xfffu + ((au >> 13) & 1u);  // round mantissa to 10 bits
  r -= 0x38000000u;                                   // rebias 127 -> 15
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

// fp8 e4m3 (OCP "fn" variant: no infinities, max 448).
PB_HD float fp8e4m3_to_float(std::uint8_t v) {
  const std::uint32_t sign = static_cast<std::uint32_t>(v & 0x80u) << 24;
  const std::uint32_t exp = (v >> 3) & 0xfu;
  const std::uint32_t man = v & 0x7u;
  if (exp == 0xf && man == 0x7) return bits_float(sign | 0x7fc00000u);
  if (exp == 0) {
    float x = static_cast<float>(man) * 0.001953125f;  // man * 2^-9
    return sign ? -x : x;
  }
  return bits_float(sign | ((exp + 120u) << 23) | (man << 20));
}

PB_HD std::uint8_t float_to_fp8e4m3(float f) {
  // Round to nearest, ties to even, saturating at 448 (the OCP "fn" format has no
  // infinity; 0x7f is NaN). Subnormals: magnitudes below 2^-6 are m x 2^-9.
  const std::uint32_t u = float_bits(f);
  const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return static_cast<std::uint8_t>(sign | 0x7fu);  // NaN stays NaN
  const float a = bits_float(au);
  if (a < 0.015625f) {
    const float q = a * 512.0f;  // [0, 8)
    std::uint32_t m = static_cast<std::uint32_t>(q);
    const float frac = q - static_cast<float>(m);
    if (frac > 0.5f || (frac == 0.5f && (m & 1u))) ++m;  // m == 8 is 2^-6, the smallest normal (0x08)
    return static_cast<std::uint8_t>(sign | m);
  }
  std::uint32_t e = (au >> 23) - 120u;  // the e4m3 exponent field (bias 7), >= 1 here
  std::uint32_t keep = (au >> 20) & 0x7u;
  const std::uint32_t rest = au & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u))) {
    if (++keep == 8) {
      keep = 0;
      ++e;
    }
  }
  const std::uint32_t r = (e << 3) | keep;
  return static_cast<std::uint8_t>(sign | (r > 0x7eu ? 0x7eu : r));
}

// fp4 e2m1 (OCP MX / NVFP4 element): 1 sign, 2 exponent (bias 1), 1 mantissa
// bit; the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; no infinity or NaN.
PB_HD float fp4e2m1_to_float(unsigned v) {
  const unsigned mag = v & 0x7u;
  // exponent 0 is subnormal (0 or 0.5); else (1 + m/2) * 2^(e-1).
  const float a = (mag >> 1) == 0 ? 0.5f * static_cast<float>(mag & 1u)
                                  : (1.0f + 0.5f * static_cast<float>(mag & 1u)) *
                                        static_cast<float>(1u << ((mag >> 1) - 1u));
  return (v & 0x8u) ? -a : a;
}

// Nearest e2m1 (ties to even mantissa), saturating at 6; NaN becomes +0.
PB_HD unsigned float_to_fp4e2m1(float f) {
  const unsigned sign = (float_bits(f) >> 28) & 0x8u;
  const float a = f < 0 ? -f : f;
  if (!(a == a)) return 0;  // NaN
  // Midpoints between neighbours; at a tie the even code (mantissa 0) wins.
  unsigned m;
  if (a <= 0.25f) m = 0;
  else if (a < 0.75f) m = 1;
  else if (a <= 1.25f) m = 2;
  else if (a < 1.75f) m = 3;
  else if (a <= 2.5f) m = 4;
  else if (a < 3.5f) m = 5;
  else if (a <= 5.0f) m = 6;
  else m = 7;
  return sign | m;
}

// e8m0 (OCP MX block scale): 2^(v - 127); 0xff is NaN.
PB_HD float e8m0_to_float(std::uint8_t v) {
  if (v == 0xffu) return bits_float(0x7fc00000u);
  if (v == 0) return bits_float(0x00400000u);  // 2^-127, a float subnormal
  return bits_float(static_cast<std::uint32_t>(v) << 23);
}

// Element i of an array of 4-bit values packed two per byte, the low nibble
// first (the int4 weights' q and zero points, ops/linear_int4.hpp).
PB_HD unsigned nibble(const std::uint8_t* packed, std::uint64_t i) {
  const unsigned b = packed[i / 2];
  return i % 2 == 0 ? (b & 0xFu) : (b >> 4);
}

// splitmix64: a counter-based hash, so any element can be generated on its own.
PB_HD std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Random non-zero value for element `i` of the buffer seeded `seed`:
// magnitude uniform in [0.25, 1), random sign, times `scale`. Non-zero so that
// a kernel that skips an input cannot match the reference by accident.
PB_HD float random_value(std::uint64_t seed, std::uint64_t i, float scale) {
  const std::uint64_t h = mix64(seed * 0x100000001b3ull ^ mix64(i));
  const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0,1)
  const float mag = 0.25f + 0.75f * u;
  return ((h & 1u) ? -mag : mag) * scale;
}

}  // namespace phasebench::numeric
