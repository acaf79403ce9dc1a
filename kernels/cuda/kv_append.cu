#include "cuda/kv_append.hpp"

#include <stdexcept>

#include "cuda/cuda_common.hpp"
#include "phasebench/error.hpp"

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

std::string kv_append_unsupported(DType dtype, long long D, bool paged, long long page_size) {
  if (element_bytes(dtype) != 2)
    return "KV append: dtype " + std::string(to_string(dtype)) + " is not supported on CUDA; use bf16 or fp16";
  if (D <= 0 || D % 8 != 0)
    return "KV append: head_dim " + std::to_string(D) + " is not supported; use a multiple of 8 (16-byte vectors)";
  if (paged && (page_size < 16 || page_size % 16 != 0))
    return "KV append: page size " + std::to_string(page_size) + " is not supported; use a multiple of 16";
  return {};
}

void launch_kv_append(const KvAppendParams& p, cudaStream_t stream) {
  const bool paged = p.block_table != nullptr;
  const std::string why = kv_append_unsupported(p.dtype, p.D, paged, p.page_size);
  if (!why.empty()) throw Unsupported(why);
  if (p.B <= 0 || p.S <= 0 || p.Hkv <= 0) throw Unsupported("KV append: batch, tokens and kv heads must be >= 1");
  const long long capacity = paged ? static_cast<long long>(p.pages_per_seq) * p.page_size : p.capacity;
  if (p.pos < 0 || p.pos + static_cast<long long>(p.S) > capacity)
    throw std::logic_error("KV append: positions " + std::to_string(p.pos) + ".." + std::to_string(p.pos + p.S - 1) +
                           " do not fit a cache of " + std::to_string(capacity) + " tokens");
  const unsigned long long n_vec = static_cast<unsigned long long>(p.B) * p.S * p.Hkv * (p.D / 8);
  if (n_vec >= (1ull << 31))
    throw Unsupported("KV append: " + std::to_string(n_vec) + " vectors per call exceed the kernel's 2^31 limit");
  const unsigned blocks = static_cast<unsigned>((n_vec + kThreads - 1) / kThreads);
  const auto* kn = static_cast<const uint4*>(p.k_new);
  const auto* vn = static_cast<const uint4*>(p.v_new);
  auto* kc = static_cast<uint4*>(p.k_cache);
  auto* vc = static_cast<uint4*>(p.v_cache);
  const unsigned vpr = static_cast<unsigned>(p.D / 8);
  if (paged) {
    kv_append_kernel<true><<<blocks, kThreads, 0, stream>>>(kn, vn, kc, vc, p.block_table, static_cast<unsigned>(n_vec),
                                                            p.S, p.Hkv, vpr, 0u, p.pos, p.page_size, p.pages_per_seq);
  } else {
    kv_append_kernel<false><<<blocks, kThreads, 0, stream>>>(kn, vn, kc, vc, nullptr, static_cast<unsigned>(n_vec), p.S,
                                                             p.Hkv, vpr, p.capacity, p.pos, 0u, 0u);
  }
  PB_CUDA_CHECK_LAUNCH("kv_append_kernel");
}

}  // namespace phasebench::cuda
