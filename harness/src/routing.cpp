// Expert routing (routing.hpp): inclusion probabilities, their expected
// experts touched, and the seeded draw the MoE benchmark runs.
#include "phasebench/routing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <stdexcept>

#include "phasebench/error.hpp"
#include "phasebench/seeded.hpp"

namespace phasebench {

std::string Routing::text() const {
  switch (kind) {
    case Kind::uniform: return "uniform";
    case Kind::zipf: return fmt::format("zipf:{:g}", value);
    case Kind::hot: return fmt::format("hot:{:g}", value);
  }
  return "uniform";
}

Routing parse_routing(const std::string& text, const std::string& flag) {
  if (text == "uniform") return {};
  if (text.rfind("zipf:", 0) == 0)
    if (auto s = seeded::bounded_number(text, 5, 10)) return {Routing::Kind::zipf, *s};
  if (text.rfind("hot:", 0) == 0)
    if (auto f = seeded::bounded_number(text, 4, 1)) return {Routing::Kind::hot, *f};
  throw InputError(flag + " " + quote_value(text) +
                   ": use uniform, or zipf:S for expert popularity proportional to 1/rank^S (S from 0 to 10, e.g. "
                   "zipf:1), or hot:F for a fraction F of the tokens sent to one hot expert (F from 0 to 1, e.g. hot:0.5)");
}

std::vector<double> routing_inclusion(std::uint64_t experts, std::uint64_t k, const Routing& r) {
  if (experts == 0) return {};
  if (k > experts)
    throw InputError(fmt::format("routing: {} experts per token of {} experts", k, experts));
  const double E = static_cast<double>(experts), K = static_cast<double>(k);
  std::vector<double> pi(experts, K / E);
  if (r.kind == Routing::Kind::uniform || (r.kind == Routing::Kind::zipf && r.value == 0)) return pi;
  if (r.kind == Routing::Kind::hot) {
    if (experts == 1) return pi;
    const double rest = (K - r.value) / (E - 1);
    if (rest > 1.0 + 1e-12 || rest < 0)
      throw InputError(fmt::format("--routing {}: with {} experts per token of {}, the others cannot take the rest "
                                   "(F must be at least {})",
                                   r.text(), k, experts, K - E + 1));
    pi.assign(experts, std::min(rest, 1.0));
    pi[0] = r.value;
    return pi;
  }
  // zipf: inclusion chances proportional to the popularity, water-filled under 1.
  std::vector<double> pop(experts);
  for (std::uint64_t i = 0; i < experts; ++i) pop[i] = std::pow(static_cast<double>(i + 1), -r.value);
  pi.assign(experts, 0.0);
  std::vector<bool> full(experts, false);
  double left = K;
  for (std::uint64_t round = 0; round < experts && left > 1e-12; ++round) {
    double mass = 0;
    for (std::uint64_t i = 0; i < experts; ++i)
      if (!full[i]) mass += pop[i];
    bool capped = false;
    for (std::uint64_t i = 0; i < experts; ++i)
      if (!full[i] && left * pop[i] / mass >= 1.0) {
        full[i] = true;
        pi[i] = 1.0;
        capped = true;
      }
    if (capped) {
      left = K;
      for (std::uint64_t i = 0; i < experts; ++i)
        if (full[i]) left -= 1.0;
      continue;
    }
    for (std::uint64_t i = 0; i < experts; ++i)
      if (!full[i]) pi[i] = left * pop[i] / mass;
    break;
  }
  return pi;
}

double expected_experts_touched(std::uint64_t experts, std::uint64_t k, std::uint64_t tokens, const Routing& r) {
  double touched = 0;
  for (double p : routing_inclusion(experts, k, r)) touched += 1.0 - std::pow(1.0 - p, static_cast<double>(tokens));
  return touched;
}

std::uint64_t RoutedTokens::touched() const {
  std::uint64_t n = 0;
  for (auto c : per_expert) n += c > 0;
  return n;
}

RoutedTokens route_tokens(std::uint64_t tokens, std::uint64_t k, std::uint64_t experts, const Routing& r,
                          std::uint64_t seed) {
  RoutedTokens out;
  out.tokens = tokens;
  out.k = k;
  out.experts = experts;
  out.per_expert.assign(experts, 0);
  if (tokens == 0 || k == 0 || experts == 0) return out;
  const auto pi = routing_inclusion(experts, k, r);
  // Cumulative sums, the last set to exactly k so that every point u + j < k falls inside.
  std::vector<double> cum(experts);
  double c = 0;
  for (std::uint64_t i = 0; i < experts; ++i) cum[i] = (c += pi[i]);
  cum[experts - 1] = static_cast<double>(k);
  out.expert.resize(tokens * k);
  out.weight.resize(tokens * k);
  for (std::uint64_t t = 0; t < tokens; ++t) {
    const std::uint64_t h = seeded::mix(seed ^ seeded::mix(t + 0x51ed));
    const double u = seeded::unit(h);
    std::uint64_t i = 0;
    double wsum = 0;
    for (std::uint64_t j = 0; j < k; ++j) {
      const double target = u + static_cast<double>(j);
      while (i + 1 < experts && cum[i] <= target) ++i;
      // Distinct even where rounding puts two points in one interval of length ~1.
      if (j > 0 && i <= out.expert[t * k + j - 1]) i = out.expert[t * k + j - 1] + 1;
      if (i >= experts) throw std::logic_error("route_tokens: systematic sampling ran past the last expert");
      out.expert[t * k + j] = static_cast<std::uint32_t>(i);
      const float w = 0.1f + 0.9f * static_cast<float>(seeded::unit(seeded::mix(h + j + 1)));
      out.weight[t * k + j] = w;
      wsum += w;
    }
    for (std::uint64_t j = 0; j < k; ++j) {
      out.weight[t * k + j] = static_cast<float>(out.weight[t * k + j] / wsum);
      ++out.per_expert[out.expert[t * k + j]];
    }
  }
  return out;
}

}  // namespace phasebench
