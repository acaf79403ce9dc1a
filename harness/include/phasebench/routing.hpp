#pragma once
// How tokens pick experts in a mixture-of-experts layer (docs/design.md,
// "Mixtures of experts"): a seeded distribution, the same one for the analytical
// model (its expected number of experts touched) and for the MoE benchmark (the
// routing it draws). Each token picks k distinct experts of E; expert i is among
// a token's picks with probability pi_i (sum pi_i = k, each at most 1):
//   uniform   pi_i = k/E;
//   zipf:S    pi_i proportional to 1/(i+1)^S, capped at 1 with the excess spread
//             over the others (S from 0 to 10);
//   hot:F     expert 0 is among a token's picks with probability F (the fraction
//             of tokens sent to the one hot expert), every other expert with
//             (k - F)/(E - 1) (F from 0 to 1).
// A drawn routing uses systematic sampling over these pi_i, so each token's k
// experts are distinct and every expert's inclusion chance is exactly pi_i:
// the expected number of experts T tokens touch is sum_i 1 - (1 - pi_i)^T.
#include <cstdint>
#include <string>
#include <vector>

namespace phasebench {

struct Routing {
  enum class Kind { uniform, zipf, hot };
  Kind kind = Kind::uniform;
  double value = 0;  // zipf: S; hot: F
  // "uniform", "zipf:1.2", "hot:0.5" (what parse_routing reads back).
  std::string text() const;
  bool operator==(const Routing& o) const { return kind == o.kind && value == o.value; }
};

// "uniform", "zipf:S" (0 <= S <= 10) or "hot:F" (0 <= F <= 1); InputError
// naming `flag` and what it takes otherwise.
Routing parse_routing(const std::string& text, const std::string& flag = "--routing");

// pi_i for E experts, k per token (k <= E). InputError when the routing cannot
// give k distinct experts (hot:F with F < k - E + 1).
std::vector<double> routing_inclusion(std::uint64_t experts, std::uint64_t k, const Routing& r);

// Expected number of distinct experts that `tokens` tokens touch: sum_i 1 - (1 - pi_i)^T.
double expected_experts_touched(std::uint64_t experts, std::uint64_t k, std::uint64_t tokens, const Routing& r);

// A drawn routing of T tokens (deterministic from the seed): token t's experts
// expert[t*k .. t*k+k-1] (ascending, distinct) with their combine weights
// (positive, summing to 1 per token, as a router's renormalized top-k softmax).
struct RoutedTokens {
  std::uint64_t tokens = 0, k = 0, experts = 0;
  std::vector<std::uint32_t> expert;
  std::vector<float> weight;
  std::vector<std::uint64_t> per_expert;  // tokens routed to each expert
  std::uint64_t touched() const;          // experts with at least one token
};
RoutedTokens route_tokens(std::uint64_t tokens, std::uint64_t k, std::uint64_t experts, const Routing& r,
                          std::uint64_t seed);

}  // namespace phasebench
