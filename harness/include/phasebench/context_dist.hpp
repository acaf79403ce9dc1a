#pragma once
// Per-sequence context lengths of a ragged decode batch (docs/design.md,
// "Multi-token and ragged decode steps"): a seeded distribution around the
// sweep's context L, the same draw for the benchmark's data, its cost and its
// verification. Every length includes the step's S new tokens and is at least S:
//   fixed         every sequence has L tokens;
//   uniform:F     uniform on [L(1-F), L(1+F)] (F from 0 to 1), mean L;
//   lognormal:SIG L * exp(SIG*z - SIG^2/2) with z standard normal (SIG from 0 to
//                 3), mean L, a long tail of long sequences as in serving traces;
//                 capped at 16 L so that one draw cannot blow up the footprint.
#include <cstdint>
#include <string>
#include <vector>

namespace phasebench {

struct ContextDist {
  enum class Kind { fixed, uniform, lognormal };
  Kind kind = Kind::fixed;
  double value = 0;  // uniform: F; lognormal: SIG
  // "fixed", "uniform:0.5", "lognormal:1" (what parse_context_dist reads back).
  std::string text() const;
  bool ragged() const { return kind != Kind::fixed; }
  bool operator==(const ContextDist& o) const { return kind == o.kind && value == o.value; }
};

// InputError naming `flag` and what it takes when `text` is none of the above.
ContextDist parse_context_dist(const std::string& text, const std::string& flag = "--context-dist");

// B lengths drawn around L (deterministic from the seed), each in [min_len, 16 L]
// (fixed: all L). InputError when L < min_len (a step's S new tokens do not fit).
std::vector<std::uint64_t> draw_context_lengths(std::uint64_t B, std::uint64_t L, const ContextDist& d,
                                                std::uint64_t seed, std::uint64_t min_len = 1);

}  // namespace phasebench
