#pragma once
// The CPU kernels' element types as C++ types: fp32 as float, bf16 and fp16 as
// tagged 16-bit words; decode() reads one as float, encode() writes a float (round
// to nearest even, common/numeric.hpp), so a kernel templated on the type runs all three.
#include <cstdint>

#include "common/numeric.hpp"

namespace phasebench::cpu {

struct Bf16 {
  std::uint16_t bits;
};
struct Fp16 {
  std::uint16_t bits;
};

inline float decode(float x) { return x; }
inline float decode(Bf16 x) { return numeric::bf16_to_float(x.bits); }
inline float decode(Fp16 x) { return numeric::fp16_to_float(x.bits); }
inline void encode(float v, float* o) { *o = v; }
inline void encode(float v, Bf16* o) { o->bits = numeric::float_to_bf16(v); }
inline void encode(float v, Fp16* o) { o->bits = numeric::float_to_fp16(v); }

}  // namespace phasebench::cpu
