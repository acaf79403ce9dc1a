#pragma once
// Exact unsigned 64-bit arithmetic that refuses to wrap: a shape whose FLOPs or
// bytes overflow is an input error, never a silently wrong number.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "phasebench/error.hpp"

namespace phasebench {

inline std::uint64_t mul(std::uint64_t a, std::uint64_t b, const char* what = "a size") {
  std::uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw InputError(std::string(what) + " overflows 64-bit arithmetic; use smaller batch/lengths");
  return r;
}
inline std::uint64_t mul(std::initializer_list<std::uint64_t> xs, const char* what = "a size") {
  std::uint64_t r = 1;
  for (auto x : xs) r = mul(r, x, what);
  return r;
}
inline std::uint64_t add(std::uint64_t a, std::uint64_t b, const char* what = "a size") {
  std::uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    throw InputError(std::string(what) + " overflows 64-bit arithmetic; use smaller batch/lengths");
  return r;
}
// A user-given size must be >= 1.
inline std::uint64_t positive(std::int64_t v, const char* what) {
  if (v <= 0) throw InputError(std::string(what) + " must be a positive integer, got " + std::to_string(v));
  return static_cast<std::uint64_t>(v);
}

}  // namespace phasebench
