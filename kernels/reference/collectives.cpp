// The collectives' reference (collectives.hpp): sums in double over the ranks in
// rank order; gathers and exchanges move elements, so they are exact.
#include "reference/collectives.hpp"

#include <stdexcept>
#include <string>

namespace phasebench::reference {

std::vector<std::vector<double>> collective(std::string_view kind, const std::vector<std::vector<float>>& inputs,
                                            std::uint64_t count) {
  const std::size_t n = inputs.size(), per = static_cast<std::size_t>(count) / n;
  std::vector<std::vector<double>> out(n);
  if (kind == "all_reduce" || kind == "reduce_scatter") {
    std::vector<double> sum(static_cast<std::size_t>(count), 0.0);
    for (const auto& in : inputs)
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += in[i];
    for (std::size_t r = 0; r < n; ++r)
      out[r] = kind == "all_reduce" ? sum : std::vector<double>(sum.begin() + static_cast<std::ptrdiff_t>(r * per),
                                                                sum.begin() + static_cast<std::ptrdiff_t>((r + 1) * per));
  } else if (kind == "all_gather") {
    for (std::size_t r = 0; r < n; ++r)
      for (const auto& in : inputs) out[r].insert(out[r].end(), in.begin(), in.end());
  } else if (kind == "all_to_all") {
    // Rank r receives block r of every rank's send buffer, in the senders' order.
    for (std::size_t r = 0; r < n; ++r)
      for (const auto& in : inputs)
        out[r].insert(out[r].end(), in.begin() + static_cast<std::ptrdiff_t>(r * per),
                      in.begin() + static_cast<std::ptrdiff_t>((r + 1) * per));
  } else {
    throw std::logic_error("reference::collective: not a collective: " + std::string(kind));
  }
  return out;
}

}  // namespace phasebench::reference
