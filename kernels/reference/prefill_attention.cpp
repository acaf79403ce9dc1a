// Prefill attention's reference (prefill_attention.hpp): attend() over the
// causal prefix, and the rows around tile edges to check.
#include "reference/prefill_attention.hpp"

#include <algorithm>

#include "reference/common.hpp"

namespace phasebench::reference {

void prefill_attention_row(const float* q, std::size_t i, std::size_t D, float scale,
                           const std::function<const float*(std::size_t)>& key,
                           const std::function<const float*(std::size_t)>& value, float* out) {
  attend(q, i + 1, D, scale, key, value, out);
}

std::vector<std::uint64_t> prefill_rows_to_check(std::uint64_t S, std::uint64_t tile) {
  if (S == 0 || tile == 0) return {};
  const std::uint64_t last_tile = (S - 1) / tile * tile;
  std::vector<std::uint64_t> rows = {0, 1, tile - 1, tile, tile + 1, last_tile, last_tile + 1, S / 2, S - 2, S - 1};
  rows.erase(std::remove_if(rows.begin(), rows.end(), [&](std::uint64_t i) { return i >= S; }), rows.end());
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

}  // namespace phasebench::reference
