// The split-KV chunking and limits both decode attentions plan with (split_kv.hpp).
#include "cuda/split_kv.hpp"

#include <algorithm>
#include <climits>

#include "phasebench/workload.hpp"

namespace phasebench::cuda {

int split_kv_chunk(int L, long long splits, int align) {
  splits = std::max(splits, 1LL);
  const long long a = std::max(align, 1);
  long long chunk = (static_cast<long long>(L) + splits - 1) / splits;
  chunk = (chunk + a - 1) / a * a;
  return static_cast<int>(std::max<long long>(chunk, 1));
}

SplitKvPlan plan_split_kv(int L, long long splits, int align, std::size_t rows, std::size_t row_floats) {
  SplitKvPlan plan;
  plan.chunk = split_kv_chunk(L, splits, align);
  plan.splits = static_cast<int>((static_cast<long long>(L) + plan.chunk - 1) / plan.chunk);
  plan.workspace_floats = plan.splits > 1 ? rows * static_cast<std::size_t>(plan.splits) * row_floats : 0;
  return plan;
}

long long requested_splits(std::uint64_t requested, int L, int most) {
  return static_cast<long long>(
      std::min<std::uint64_t>({requested, static_cast<std::uint64_t>(L), static_cast<std::uint64_t>(most)}));
}

std::optional<std::string> split_kv_request_unsupported(const std::string& what, std::uint64_t B, std::uint64_t L,
                                                        std::uint64_t requested_splits, int most,
                                                        std::uint64_t page_size) {
  if (B == 0 || L == 0) return what + ": batch and context must be >= 1";
  if (L > static_cast<std::uint64_t>(INT_MAX)) return what + ": contexts past 2^31 tokens";
  if (B > 65535) return what + ": batch " + std::to_string(B) + " exceeds 65535 (a grid dimension)";
  if (requested_splits > static_cast<std::uint64_t>(most))
    return what + ": " + std::to_string(requested_splits) + " splits requested; at most " + std::to_string(most);
  if (page_size > 0 && (page_size > static_cast<std::uint64_t>(INT_MAX) ||
                        B * pages_per_sequence(L, page_size) > static_cast<std::uint64_t>(INT_MAX)))
    return what + " (paged): more than 2^31 pages";
  return std::nullopt;
}

}  // namespace phasebench::cuda
