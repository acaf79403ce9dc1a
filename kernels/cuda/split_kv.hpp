#pragma once
// Split-KV as decode attention and MLA decode attention both plan it: a context
// of L tokens cut into chunks that CTAs walk in parallel, each writing a partial
// result per query row that a second kernel merges. The chunking, the partials'
// workspace and a request's limits, shared by both operations' planners.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace phasebench::cuda {

// `splits` chunks of `chunk` tokens (the last one shorter), and the fp32
// workspace of their partial results (0 for one split, which writes the output).
struct SplitKvPlan {
  int splits = 1;
  int chunk = 1;  // tokens per split
  std::size_t workspace_floats = 0;
};

// Tokens per split for `splits` chunks of L, rounded up to a multiple of `align` (>= 1).
int split_kv_chunk(int L, long long splits, int align);

// `splits` (>= 1) chunks of L tokens, each a multiple of `align`, then as many
// splits as those chunks make; a partial of `row_floats` floats for each of
// `rows` query rows per split.
SplitKvPlan plan_split_kv(int L, long long splits, int align, std::size_t rows, std::size_t row_floats);

// The splits a request names (its "splits" parameter, > 0), at most one per token and `most`.
long long requested_splits(std::uint64_t requested, int L, int most);

// What a split-KV decode request of `B` sequences of up to `L` tokens cannot
// run, as `what` says it ("decode attention"): no batch or context, a batch
// past a grid dimension, a context past 32-bit indexing, more than `most`
// requested splits, or (page_size > 0) a paged pool of more than 2^31 pages.
std::optional<std::string> split_kv_request_unsupported(const std::string& what, std::uint64_t B, std::uint64_t L,
                                                        std::uint64_t requested_splits, int most,
                                                        std::uint64_t page_size);

}  // namespace phasebench::cuda
