#pragma once
// The weight-only int4 linear layer (harness/src/ops/linear_int4.cpp): Y[M,N] =
// X[M,K] W^T with W stored as 4-bit integers in groups of G along K, each group
// with a bf16 scale and a 4-bit zero point (AWQ/GPTQ-style): w = (q - z) * s.
// X and Y are bf16, the products accumulate in fp32.
#include <cstdint>

#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kLinearInt4 = "linear_int4";

// The packed layout every backend uses, so that its bytes are exactly
// WeightFormat int4's: q [N][K/2] bytes (weight k of a row in the low nibble of
// byte k/2 when k is even, the high nibble when odd); scales [N][K/G] bf16;
// zero points 4-bit, two per byte over the flat index n*(K/G) + g (low nibble
// first), ceil(N*K/G / 2) bytes.
struct Int4Layout {
  std::uint64_t N = 0, K = 0, G = 0;
  std::uint64_t groups_per_row() const { return K / G; }
  std::uint64_t q_bytes() const;
  std::uint64_t scale_bytes() const;
  std::uint64_t zero_bytes() const;
  std::uint64_t total_bytes() const { return q_bytes() + scale_bytes() + zero_bytes(); }
};
// The weight format (for costs): 4 bits a weight, 16 + 4 bits a group, bf16 compute.
WeightFormat int4_weight_format(std::uint64_t group);
// InputError unless G is 32, 64, 128 or 256 and divides K.
void check_int4_shape(const LinearShape& s, std::uint64_t group);

// An int4 linear request's options (OpRequest::options).
struct LinearInt4Options {
  std::uint64_t group = 128;  // G: weights per scale and zero point along K
};

OpRequest linear_int4_request(const LinearShape& s, std::uint64_t group, Impl impl, std::uint64_t seed = 0x5eed);

}  // namespace phasebench
