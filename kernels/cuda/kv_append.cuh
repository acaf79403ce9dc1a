#pragma once
// KV append's kernel (kv_append.hpp; kv_append.cu launches it): a copy in
// 16-byte vectors into a contiguous cache or a paged pool. Device code only, in
// the anonymous namespace of the one file that includes it (kv_append.cu), so
// the kernel's name is that file's.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace phasebench::cuda {

namespace {

constexpr int kThreads = 256;

// One thread per 16-byte vector of the new tokens: vector `idx` of
// [B, S, Hkv, D/8] is read from k_new/v_new at idx and written to its slot.
template <bool Paged>
__global__ void __launch_bounds__(kThreads)
    kv_append_kernel(const uint4* __restrict__ k_new, const uint4* __restrict__ v_new, uint4* __restrict__ k_cache,
                     uint4* __restrict__ v_cache, const std::int32_t* __restrict__ block_table, unsigned n_vec,
                     unsigned S, unsigned Hkv, unsigned vec_per_row, unsigned capacity, unsigned pos,
                     unsigned page_size, unsigned pages_per_seq) {
  const unsigned idx = blockIdx.x * kThreads + threadIdx.x;
  if (idx >= n_vec) return;
  // Issue the loads first; the index arithmetic below overlaps their latency.
  const uint4 kx = __ldcs(k_new + idx);
  const uint4 vx = __ldcs(v_new + idx);
  const unsigned dv = idx % vec_per_row;
  unsigned rest = idx / vec_per_row;
  const unsigned h = rest % Hkv;
  rest /= Hkv;
  const unsigned s = rest % S;
  const unsigned b = rest / S;
  const unsigned t = pos + s;
  std::size_t dst;
  if constexpr (Paged) {
    const unsigned page = static_cast<unsigned>(__ldg(block_table + static_cast<std::size_t>(b) * pages_per_seq + t / page_size));
    dst = ((static_cast<std::size_t>(page) * Hkv + h) * page_size + t % page_size) * vec_per_row + dv;
  } else {
    dst = ((static_cast<std::size_t>(b) * Hkv + h) * capacity + t) * vec_per_row + dv;
  }
  __stcs(k_cache + dst, kx);  // streaming stores: the cache lines are not read again by this kernel
  __stcs(v_cache + dst, vx);
}

}  // namespace

}  // namespace phasebench::cuda
