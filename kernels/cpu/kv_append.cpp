// KV append on the CPU: copy each new token's K and V rows (D contiguous
// elements) into the cache, contiguous or paged. Pure data movement.
#include <cstring>

#include "cpu/cpu_kernels.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cpu {

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
#pragma omp parallel for schedule(static) if (static_cast<std::uint64_t>(rows) * row_bytes > (256u << 10))
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
    std::memcpy(kc + dst_row * row_bytes, nk + ur * row_bytes, row_bytes);
    std::memcpy(vc + dst_row * row_bytes, nv + ur * row_bytes, row_bytes);
  }
}

}  // namespace phasebench::cpu
