// The whole layer's elementwise kernels (elementwise.hpp): RMSNorm, NeoX RoPE in
// place on the fused qkv, and SiLU(gate) * up, in 16-bit storage with fp32 math.
#include "cuda/elementwise.hpp"

#include <cmath>
#include <string>

#include "cuda/attention_util.cuh"
#include "cuda/cuda_common.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cuda {

namespace {

void require_16bit(DType t, const char* op) {
  if (t != DType::bf16 && t != DType::fp16)
    throw Unsupported(std::string(op) + ": dtype " + std::string(to_string(t)) + " is not supported on CUDA; use bf16 or fp16");
}

template <class F>
void by_dtype(DType t, F&& f) {
  if (t == DType::bf16)
    f(Bf16Tag{});
  else
    f(Fp16Tag{});
}

constexpr int kNormThreads = 256;

// One CTA per row: sum of squares in fp32 (16-byte loads), then a second pass
// (from L1/L2) that scales and writes.
template <class Tag>
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(const uint4* __restrict__ x, const uint4* __restrict__ w, uint4* __restrict__ out, int vec_per_row,
                   float inv_h, float eps) {
  __shared__ float red[kNormThreads / 32];
  const std::size_t row = blockIdx.x;
  const uint4* xr = x + row * vec_per_row;
  float ss = 0.f;
  for (int i = threadIdx.x; i < vec_per_row; i += kNormThreads) {
    float f[8];
    unpack8<Tag>(__ldg(xr + i), f);
#pragma unroll
    for (int j = 0; j < 8; ++j) ss = fmaf(f[j], f[j], ss);
  }
  const float inv_rms = rsqrtf(block_sum<kNormThreads>(ss, red) * inv_h + eps);
  uint4* orow = out + row * vec_per_row;
  for (int i = threadIdx.x; i < vec_per_row; i += kNormThreads) {
    float f[8], g[8];
    unpack8<Tag>(__ldg(xr + i), f);
    unpack8<Tag>(__ldg(w + i), g);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = f[j] * inv_rms * g[j];
    orow[i] = pack8<Tag>(f);
  }
}

// One thread per (token, q-or-k head, 8 rotation pairs): elements i0..i0+7 and
// i0+D/2..i0+D/2+7 of the head.
template <class Tag>
__global__ void rope_neox_kernel(std::uint16_t* __restrict__ qkv, const std::int32_t* __restrict__ positions,
                                 unsigned n, int heads_rotated, int heads_total, int D, float log2_theta) {
  const unsigned idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const int groups = D / 16;  // 8-pair groups per head
  const int grp = static_cast<int>(idx % groups);
  const unsigned rest = idx / groups;
  const int head = static_cast<int>(rest % heads_rotated);
  const unsigned m = rest / heads_rotated;
  const float pos = static_cast<float>(__ldg(positions + m));
  std::uint16_t* h = qkv + (static_cast<std::size_t>(m) * heads_total + head) * D;
  const int i0 = grp * 8;
  uint4* p1 = reinterpret_cast<uint4*>(h + i0);
  uint4* p2 = reinterpret_cast<uint4*>(h + i0 + D / 2);
  float a[8], b[8];
  unpack8<Tag>(*p1, a);
  unpack8<Tag>(*p2, b);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float inv_freq = exp2f(-static_cast<float>(2 * (i0 + j)) / static_cast<float>(D) * log2_theta);
    float s, c;
    sincosf(pos * inv_freq, &s, &c);  // accurate sincos: angles reach thousands of radians
    const float x1 = a[j], x2 = b[j];
    a[j] = x1 * c - x2 * s;
    b[j] = x2 * c + x1 * s;
  }
  *p1 = pack8<Tag>(a);
  *p2 = pack8<Tag>(b);
}

template <class Tag>
__global__ void silu_mul_kernel(const uint4* __restrict__ gate_up, uint4* __restrict__ out, unsigned n,
                                int vec_per_row) {
  const unsigned idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const unsigned m = idx / vec_per_row;
  const unsigned i = idx % vec_per_row;
  const uint4* row = gate_up + static_cast<std::size_t>(m) * 2 * vec_per_row;
  float g[8], u[8];
  unpack8<Tag>(__ldcs(row + i), g);
  unpack8<Tag>(__ldcs(row + vec_per_row + i), u);
#pragma unroll
  for (int j = 0; j < 8; ++j) g[j] = g[j] / (1.f + __expf(-g[j])) * u[j];
  out[idx] = pack8<Tag>(g);
}

}  // namespace

void launch_rmsnorm(DType dtype, const void* x, const void* weight, void* out, int M, int H, float eps,
                    cudaStream_t stream) {
  require_16bit(dtype, "rmsnorm");
  if (M <= 0 || H <= 0 || H % 8 != 0)
    throw Unsupported("rmsnorm: rows must be >= 1 and the hidden size a positive multiple of 8, got M=" +
                      std::to_string(M) + " H=" + std::to_string(H));
  by_dtype(dtype, [&](auto tag) {
    rmsnorm_kernel<decltype(tag)><<<static_cast<unsigned>(M), kNormThreads, 0, stream>>>(
        static_cast<const uint4*>(x), static_cast<const uint4*>(weight), static_cast<uint4*>(out), H / 8,
        1.f / static_cast<float>(H), eps);
  });
  PB_CUDA_CHECK_LAUNCH("rmsnorm_kernel");
}

void launch_rope_neox(DType dtype, void* qkv, const std::int32_t* positions, int M, int Hq, int Hkv, int D,
                      float theta, cudaStream_t stream) {
  require_16bit(dtype, "rope");
  if (M <= 0 || Hq <= 0 || Hkv <= 0 || D <= 0 || D % 16 != 0)
    throw Unsupported("rope: head_dim must be a positive multiple of 16 (and M, heads >= 1), got D=" +
                      std::to_string(D));
  const unsigned long long n = static_cast<unsigned long long>(M) * (Hq + Hkv) * (D / 16);
  if (n >= (1ull << 32)) throw Unsupported("rope: too many elements for one launch");
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  by_dtype(dtype, [&](auto tag) {
    rope_neox_kernel<decltype(tag)><<<blocks, threads, 0, stream>>>(static_cast<std::uint16_t*>(qkv), positions,
                                                                    static_cast<unsigned>(n), Hq + Hkv, Hq + 2 * Hkv, D,
                                                                    std::log2(theta));
  });
  PB_CUDA_CHECK_LAUNCH("rope_neox_kernel");
}

void launch_silu_mul(DType dtype, const void* gate_up, void* out, int M, int I, cudaStream_t stream) {
  require_16bit(dtype, "silu_mul");
  if (M <= 0 || I <= 0 || I % 8 != 0)
    throw Unsupported("silu_mul: the intermediate size must be a positive multiple of 8, got I=" + std::to_string(I));
  const unsigned long long n = static_cast<unsigned long long>(M) * (I / 8);
  if (n >= (1ull << 32)) throw Unsupported("silu_mul: too many elements for one launch");
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  by_dtype(dtype, [&](auto tag) {
    silu_mul_kernel<decltype(tag)><<<blocks, threads, 0, stream>>>(static_cast<const uint4*>(gate_up),
                                                                   static_cast<uint4*>(out), static_cast<unsigned>(n),
                                                                   I / 8);
  });
  PB_CUDA_CHECK_LAUNCH("silu_mul_kernel");
}

}  // namespace phasebench::cuda
