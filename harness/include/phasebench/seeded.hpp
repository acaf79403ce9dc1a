#pragma once
// What the seeded distributions of the harness share (routing.hpp,
// context_dist.hpp): a counter-based hash for their draws, and the parsing of
// a spec's bounded number ("zipf:1.2", "lognormal:1").
#include <cmath>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

namespace phasebench::seeded {

// splitmix64: any draw can be made on its own from (seed, index).
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// [0, 1) from a hash's top 53 bits.
inline double unit(std::uint64_t h) { return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0); }
// (0, 1): never 0, for log().
inline double open_unit(std::uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

// The number that fills `text` after its first `prefix` characters, when it is
// finite and within [0, hi]; nothing otherwise (trailing characters included).
inline std::optional<double> bounded_number(const std::string& text, std::size_t prefix, double hi) {
  try {
    std::size_t used = 0;
    const double v = std::stod(text.substr(prefix), &used);
    if (used == text.size() - prefix && std::isfinite(v) && v >= 0 && v <= hi) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace phasebench::seeded
