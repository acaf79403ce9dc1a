#pragma once
// The whole layer's own kernel (layer.hpp; layer.cu launches it): q, k and v
// out of the fused QKV projection (the layer's other kernels are elementwise.cu's,
// the attention and KV-append kernels their operations', the projections
// cuBLASLt's). Device code only, in the anonymous namespace of the one file that
// includes it (layer.cu), so the kernel's name is that file's.
#include <cuda_runtime.h>

#include <cstddef>

namespace phasebench::cuda {

namespace {

// q, k, v out of the fused projection: qkv [M, Nq + 2*Nkv] -> q [M, Nq], k [M, Nkv],
// v [M, Nkv]. A copy in 16-byte vectors (Nq and Nkv are multiples of 8 elements).
__global__ void qkv_split_kernel(const uint4* __restrict__ qkv, uint4* __restrict__ q, uint4* __restrict__ k,
                                 uint4* __restrict__ v, unsigned n, int vq, int vkv) {
  const unsigned idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const int row_vecs = vq + 2 * vkv;
  const std::size_t m = idx / row_vecs;
  const int c = static_cast<int>(idx % row_vecs);
  const uint4 val = __ldcs(qkv + idx);
  if (c < vq)
    q[m * vq + c] = val;
  else if (c < vq + vkv)
    k[m * vkv + (c - vq)] = val;
  else
    v[m * vkv + (c - vq - vkv)] = val;
}

}  // namespace

}  // namespace phasebench::cuda
