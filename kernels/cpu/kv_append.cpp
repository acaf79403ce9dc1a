// KV append on the CPU: copy each new token's K and V rows (D contiguous
// elements) into the cache, contiguous or paged. Pure data movement.
#include <cstdint>
#include <cstring>

#include "cpu/cpu_kernels.hpp"
#include "cpu/simd.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cpu {

namespace {

// One row into the cache. The rows land one per (sequence, head), each in lines
// of its own, so a plain store first reads every destination line from memory
// (read for ownership) and doubles the traffic; streaming stores write whole
// lines without reading them. Plain memcpy where rows are not whole 32-byte
// vectors at aligned addresses.
inline void copy_row(unsigned char* dst, const unsigned char* src, std::uint64_t bytes) {
#ifdef PB_CPU_AVX2
  if (bytes % 32 == 0 && reinterpret_cast<std::uintptr_t>(dst) % 32 == 0) {
    for (std::uint64_t o = 0; o < bytes; o += 32)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + o),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + o)));
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

// Streaming stores are weakly ordered: fence them before the append returns, so
// they are complete (and inside the timed region) when it does.
inline void fence_stores() {
#ifdef PB_CPU_AVX2
  _mm_sfence();
#endif
}

}  // namespace

void kv_append(const KvAppendArgs& a) {
  if (a.pos + a.S > a.capacity) throw Unsupported("KV append past the end of the cache");
  const std::uint64_t row_bytes = a.D * a.element_bytes;
  const std::int64_t rows = static_cast<std::int64_t>(a.B * a.S * a.Hkv);
  const bool paged = a.block_table != nullptr;
  const auto* nk = static_cast<const unsigned char*>(a.new_k);
  const auto* nv = static_cast<const unsigned char*>(a.new_v);
  auto* kc = static_cast<unsigned char*>(a.k_cache);
  auto* vc = static_cast<unsigned char*>(a.v_cache);
// Small appends (a few KiB) are faster on one thread than a parallel region's fork/join.
#pragma omp parallel if (static_cast<std::uint64_t>(rows) * row_bytes > (256u << 10))
  {
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint64_t ur = static_cast<std::uint64_t>(r);
      const std::uint64_t h = ur % a.Hkv, s = (ur / a.Hkv) % a.S, b = ur / (a.Hkv * a.S);
      const std::uint64_t p = a.pos + s;
      std::uint64_t dst_row;
      if (paged) {
        const auto page = static_cast<std::uint64_t>(a.block_table[b * a.pages_per_seq + p / a.page_size]);
        dst_row = (page * a.Hkv + h) * a.page_size + p % a.page_size;
      } else {
        dst_row = (b * a.Hkv + h) * a.capacity + p;
      }
      copy_row(kc + dst_row * row_bytes, nk + ur * row_bytes, row_bytes);
      copy_row(vc + dst_row * row_bytes, nv + ur * row_bytes, row_bytes);
    }
    fence_stores();  // each thread its own stores
  }
}

}  // namespace phasebench::cpu
