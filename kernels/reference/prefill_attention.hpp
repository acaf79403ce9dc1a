#pragma once
// The reference of causal prefill attention (ops/prefill_attention.hpp): one prompt
// row, and which rows of a tiled output are worth checking.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace phasebench::reference {

// Causal attention for query position i (0-based) of a prompt: attends keys 0..i.
void prefill_attention_row(const float* q, std::size_t i, std::size_t D, float scale,
                           const std::function<const float*(std::size_t)>& key,
                           const std::function<const float*(std::size_t)>& value, float* out);

// Prompt rows worth checking in a causal attention output computed in tiles of
// `tile` rows: the first two, both sides of the first tile edge, the last
// tile's first two, the middle and the last two (those below S, ascending).
std::vector<std::uint64_t> prefill_rows_to_check(std::uint64_t S, std::uint64_t tile);

}  // namespace phasebench::reference
