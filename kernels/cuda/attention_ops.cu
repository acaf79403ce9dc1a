// The helpers the KV-cache and attention operations share (attention_ops.hpp):
// buffer seeds, the paged pool's logical fill (a grid-stride kernel that writes
// each logical element of the contiguous cache into its page slot), the caches'
// fill and read-back, the ops' test access.
#include "cuda/attention_ops.hpp"

#include <algorithm>

#include "common/numeric.hpp"
#include "common/paged_kv.hpp"
#include "reference/common.hpp"
#include "cuda/attention_util.cuh"
#include "cuda/cuda_common.hpp"

namespace phasebench::cuda {

std::uint64_t seed_of(std::uint64_t seed, KvBuf b) { return buffer_seed(seed, static_cast<std::uint64_t>(b)); }

std::uint16_t encode_host(DType t, float v) {
  return t == DType::bf16 ? numeric::float_to_bf16(v) : numeric::float_to_fp16(v);
}

// `rows` rows of `row_elems` elements, `pitch_elems` apart on the device, decoded to floats [rows][row_elems].
std::vector<float> download_2d_as_float(const void* src, DType t, std::size_t rows, std::size_t row_elems,
                                        std::size_t pitch_elems, cudaStream_t stream) {
  const std::size_t es = element_bytes(t);
  std::vector<unsigned char> raw(rows * row_elems * es);
  if (!raw.empty()) {
    PB_CUDA_CHECK(cudaMemcpy2DAsync(raw.data(), row_elems * es, src, pitch_elems * es, row_elems * es, rows,
                                    cudaMemcpyDeviceToHost, stream));
    PB_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return reference::to_float(raw.data(), t, rows * row_elems);
}

// n indices in [0, total) including the first and the last, evenly spaced; all when total <= n.
std::vector<std::uint64_t> spread_sample(std::uint64_t total, std::uint64_t n) {
  std::vector<std::uint64_t> idx;
  if (total <= n) {
    for (std::uint64_t i = 0; i < total; ++i) idx.push_back(i);
    return idx;
  }
  n = std::max<std::uint64_t>(n, 2);
  for (std::uint64_t k = 0; k < n; ++k) idx.push_back(k * (total - 1) / (n - 1));
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  return idx;
}

BlockTable::BlockTable(const OpRequest& r, std::uint64_t page, int B, std::uint64_t tokens)
    : page_size(static_cast<int>(page)),
      pages_per_seq(static_cast<int>(pages_per_sequence(tokens, page))),
      host(scattered_block_table(static_cast<std::uint64_t>(B), static_cast<std::uint64_t>(pages_per_seq),
                                 seed_of(r.seed, KvBuf::block_table))) {}

void BlockTable::to_device(cudaStream_t stream) {
  device = DeviceBuffer(host.size() * sizeof(std::int32_t));
  upload(device.get(), host.data(), device.bytes(), stream);
}

std::vector<float> AttentionOpBase::output_as_float() {
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  const DeviceBuffer& out = output();
  return download_as_float(out.get(), r_.dtype, out.bytes() / element_bytes(r_.dtype), ctx_.stream);
}

void download_kv_rows(void* dst, const void* cache, std::size_t es, const BlockTable& pool, std::size_t b,
                      std::size_t h, std::size_t Hkv, std::size_t L, std::size_t len, std::size_t row_elems,
                      cudaStream_t stream) {
  auto* d = static_cast<unsigned char*>(dst);
  if (pool.page_size == 0) {
    PB_CUDA_CHECK(cudaMemcpyAsync(d, byte_ptr(cache, (b * Hkv + h) * L * row_elems, es), len * row_elems * es,
                                  cudaMemcpyDeviceToHost, stream));
    return;
  }
  const std::size_t P = static_cast<std::size_t>(pool.page_size);
  for (std::size_t lp = 0; lp * P < len; ++lp) {
    const std::size_t page = static_cast<std::size_t>(pool.host[b * pool.pages_per_seq + lp]);
    const std::size_t tokens = std::min(P, len - lp * P);
    PB_CUDA_CHECK(cudaMemcpyAsync(d + lp * P * row_elems * es, byte_ptr(cache, (page * Hkv + h) * P * row_elems, es),
                                  tokens * row_elems * es, cudaMemcpyDeviceToHost, stream));
  }
}

namespace {

// Writes logical element (b, h, t, d), t < L, of a [B, Hkv, L, D] cache filled
// with fill_random(seed) into its paged slot, so that a paged pool holds exactly
// what the contiguous cache of the same seed holds (pages: [pages, Hkv, P, D]).
// Elem: std::uint16_t (bf16/fp16 by Tag) or std::uint8_t (fp8 e4m3).
template <class Tag, class Elem>
__global__ void paged_logical_fill_kernel(Elem* __restrict__ pool, const std::int32_t* __restrict__ block_table,
                                          std::uint64_t seed, int Hkv, int L, int D, int P, int pages_per_seq,
                                          std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int d = static_cast<int>(i % D);
    std::size_t rest = i / D;
    const int t = static_cast<int>(rest % L);
    rest /= L;
    const int h = static_cast<int>(rest % Hkv);
    const std::size_t b = rest / Hkv;
    const int page = block_table[b * pages_per_seq + t / P];
    const float v = numeric::random_value(seed, i, 1.0f);
    Elem& dst = pool[((static_cast<std::size_t>(page) * Hkv + h) * P + t % P) * D + d];
    if constexpr (sizeof(Elem) == 1)
      dst = numeric::float_to_fp8e4m3(v);
    else
      dst = encode<Tag>(v);
  }
}

}  // namespace

void paged_logical_fill(void* pool, const std::int32_t* block_table, DType t, std::uint64_t seed, int B, int Hkv, int L,
                        int D, int P, int pages_per_seq, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(B) * Hkv * L * D;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((n + threads - 1) / threads, 65535u * 4));
  auto* p = static_cast<std::uint16_t*>(pool);
  if (t == DType::fp8)
    paged_logical_fill_kernel<Bf16Tag><<<blocks, threads, 0, stream>>>(static_cast<std::uint8_t*>(pool), block_table, seed,
                                                                       Hkv, L, D, P, pages_per_seq, n);
  else if (t == DType::bf16)
    paged_logical_fill_kernel<Bf16Tag><<<blocks, threads, 0, stream>>>(p, block_table, seed, Hkv, L, D, P, pages_per_seq, n);
  else
    paged_logical_fill_kernel<Fp16Tag><<<blocks, threads, 0, stream>>>(p, block_table, seed, Hkv, L, D, P, pages_per_seq, n);
  PB_CUDA_CHECK_LAUNCH("paged_logical_fill_kernel");
}

void fill_kv_cache(void* cache, DType t, std::size_t elems, const BlockTable& pool, std::uint64_t seed, KvBuf logical,
                   KvBuf pool_fill, int B, int Hkv, int L, int D, cudaStream_t stream) {
  if (pool.page_size == 0) {
    fill_random(cache, t, elems, seed_of(seed, logical), 1.0f, stream);
    return;
  }
  fill_random(cache, t, elems, seed_of(seed, pool_fill), 1.0f, stream);
  paged_logical_fill(cache, pool.table(), t, seed_of(seed, logical), B, Hkv, L, D, pool.page_size, pool.pages_per_seq,
                     stream);
}

}  // namespace phasebench::cuda
