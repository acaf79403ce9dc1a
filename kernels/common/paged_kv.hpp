#pragma once
// The paged KV cache's block table, shared by the CPU and CUDA backends: each
// sequence's logical pages map to a deterministic random permutation of the
// pool's pages (Fisher-Yates on splitmix64), so consecutive pages of a sequence
// are not adjacent in memory, and both backends scatter the same seed the same way.
#include <cstdint>
#include <utility>
#include <vector>

#include "common/numeric.hpp"
#include "phasebench/error.hpp"

namespace phasebench {

// [B, pages_per_seq] int32 page ids; Unsupported beyond 2^31 pages.
inline std::vector<std::int32_t> scattered_block_table(std::uint64_t B, std::uint64_t pages_per_seq,
                                                       std::uint64_t seed) {
  const std::uint64_t n = B * pages_per_seq;
  if (pages_per_seq != 0 && n / pages_per_seq != B) throw Unsupported("paged KV cache: too many pages");
  if (n > 0x7fffffffull) throw Unsupported("paged KV cache: more than 2^31 pages");
  std::vector<std::int32_t> t(n);
  for (std::uint64_t i = 0; i < n; ++i) t[i] = static_cast<std::int32_t>(i);
  for (std::uint64_t i = n; i > 1; --i) std::swap(t[i - 1], t[numeric::mix64(seed + i) % i]);
  return t;
}

}  // namespace phasebench
