#pragma once
// Device helpers shared by the attention, KV-cache and elementwise kernels:
// 16-bit element types as tags, 8-wide unpacking of a 16-byte vector,
// float -> storage encoding (round to nearest even, as numeric.hpp does), and
// the sum of a value over a CTA (the norms' sum of squares).
// CUDA-only (include from .cu files).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace phasebench::cuda {

struct Bf16Tag {
  using native = __nv_bfloat16;
};
struct Fp16Tag {
  using native = __half;
};

__device__ __forceinline__ float to_float(Bf16Tag, std::uint16_t x) { return __uint_as_float(static_cast<unsigned>(x) << 16); }
__device__ __forceinline__ float to_float(Fp16Tag, std::uint16_t x) { return __half2float(__ushort_as_half(x)); }

template <class Tag>
__device__ __forceinline__ float decode(std::uint16_t x) {
  return to_float(Tag{}, x);
}

__device__ __forceinline__ std::uint16_t from_float(Bf16Tag, float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
__device__ __forceinline__ std::uint16_t from_float(Fp16Tag, float v) { return __half_as_ushort(__float2half_rn(v)); }

template <class Tag>
__device__ __forceinline__ std::uint16_t encode(float v) {
  return from_float(Tag{}, v);
}

// One fp8 e4m3 element (OCP "fn") to float: its 7 magnitude bits placed at the
// bottom of an fp32 exponent and the top of the mantissa, times 2^120 (the bias
// difference), exact for normal and subnormal values; no PTX conversion needed.
__device__ __forceinline__ float fp8e4m3_to_float(unsigned b) {
  return __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7fu) << 20)) * 1.329227995784916e36f;
}

// Eight fp8 e4m3 elements of an 8-byte vector (element 0 in the low byte of .x) to floats.
// The vectors are taken by value: `unpack8(*p, f)` is one vector load (the emulation's
// counters see a read through a reference field by field, as four loads).
__device__ __forceinline__ void unpack8_fp8(uint2 u, float (&f)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = fp8e4m3_to_float(((i < 4 ? u.x : u.y) >> (8 * (i % 4))) & 0xffu);
}

// Eight 16-bit elements of a 16-byte vector (element 0 in the low half of .x) to floats.
template <class Tag>
__device__ __forceinline__ void unpack8(uint4 u, float (&f)[8]) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = decode<Tag>(static_cast<std::uint16_t>(w[i] & 0xffffu));
    f[2 * i + 1] = decode<Tag>(static_cast<std::uint16_t>(w[i] >> 16));
  }
}

// Eight floats to a 16-byte vector of 16-bit elements.
template <class Tag>
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  unsigned w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = static_cast<unsigned>(encode<Tag>(f[2 * i])) | (static_cast<unsigned>(encode<Tag>(f[2 * i + 1])) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The sum of every thread's `v` over a CTA of `Threads` threads (a multiple of 32),
// returned to every thread: a warp shuffle, then each warp's sum through
// `warp_sums` (Threads / 32 floats of shared memory). Every thread must call it.
template <int Threads>
__device__ __forceinline__ float block_sum(float v, float* warp_sums) {
  static_assert(Threads % 32 == 0, "whole warps");
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < Threads / 32; ++w) total += warp_sums[w];
  return total;
}

}  // namespace phasebench::cuda
