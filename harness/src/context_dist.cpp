// Ragged decode batches (context_dist.hpp): parsing the distribution and its
// seeded draw of per-sequence context lengths.
#include "phasebench/context_dist.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "phasebench/error.hpp"
#include "phasebench/seeded.hpp"

namespace phasebench {

std::string ContextDist::text() const {
  switch (kind) {
    case Kind::fixed: return "fixed";
    case Kind::uniform: return fmt::format("uniform:{:g}", value);
    case Kind::lognormal: return fmt::format("lognormal:{:g}", value);
  }
  return "fixed";
}

ContextDist parse_context_dist(const std::string& text, const std::string& flag) {
  if (text == "fixed") return {};
  if (text.rfind("uniform:", 0) == 0)
    if (auto f = seeded::bounded_number(text, 8, 1)) return {ContextDist::Kind::uniform, *f};
  if (text.rfind("lognormal:", 0) == 0)
    if (auto s = seeded::bounded_number(text, 10, 3)) return {ContextDist::Kind::lognormal, *s};
  throw InputError(flag + " " + quote_value(text) +
                   ": use fixed (every sequence at the context), uniform:F for lengths uniform within +-F of the "
                   "context (F from 0 to 1, e.g. uniform:0.5), or lognormal:SIG for a long-tailed spread with mean "
                   "the context (SIG from 0 to 3, e.g. lognormal:1)");
}

std::vector<std::uint64_t> draw_context_lengths(std::uint64_t B, std::uint64_t L, const ContextDist& d,
                                                std::uint64_t seed, std::uint64_t min_len) {
  min_len = std::max<std::uint64_t>(min_len, 1);
  if (L < min_len)
    throw InputError(fmt::format("context {} is shorter than the step's {} new tokens; use a context of at least {}", L,
                                 min_len, min_len));
  std::vector<std::uint64_t> out(B, L);
  if (!d.ragged()) return out;
  const double Ld = static_cast<double>(L), cap = 16.0 * Ld;
  for (std::uint64_t b = 0; b < B; ++b) {
    const std::uint64_t h = seeded::mix(seed ^ seeded::mix(b + 0xc0de));
    double x = Ld;
    if (d.kind == ContextDist::Kind::uniform) {
      x = Ld * (1.0 - d.value) + seeded::open_unit(h) * 2.0 * d.value * Ld;
    } else {  // Box-Muller: one standard normal from two uniforms
      const double z = std::sqrt(-2.0 * std::log(seeded::open_unit(h))) *
                       std::cos(6.283185307179586 * seeded::open_unit(seeded::mix(h)));
      x = Ld * std::exp(d.value * z - 0.5 * d.value * d.value);
    }
    x = std::min(std::round(x), cap);
    out[b] = std::max(min_len, static_cast<std::uint64_t>(std::max(x, 0.0)));
  }
  return out;
}

}  // namespace phasebench
