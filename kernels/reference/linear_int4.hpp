#pragma once
// The reference of a weight-only int4 linear layer (ops/linear_int4.hpp): its
// seeded packed weights, their dequantized rows and the check of sampled outputs.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace phasebench::reference {

// Weight-only int4 (ops/linear_int4.hpp's layout: q [N][K/2] nibbles, bf16
// scales [N][K/G], 4-bit zeros packed over n*(K/G)+g): fill_int4 writes seeded
// random weights, scales near 1/8 and zeros; int4_weight_row dequantizes row n
// to K floats, (q - z) * s.
void fill_int4(std::uint8_t* q, std::uint16_t* scales, std::uint8_t* zeros, std::size_t N, std::size_t K, std::size_t G,
               std::uint64_t seed);
std::vector<float> int4_weight_row(const std::uint8_t* q, const std::uint16_t* scales, const std::uint8_t* zeros,
                                   std::size_t n, std::size_t K, std::size_t G);
// Checks an int4 linear layer's output at `positions` (m, n): `got(m, n)` against
// linear_element of X's row m (M x K floats) and W's row n dequantized (each
// row once), with bf16 tolerances; throws VerificationError naming `what`.
void check_int4_linear(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& positions, const float* X,
                       const std::uint8_t* q, const std::uint16_t* scales, const std::uint8_t* zeros, std::size_t K,
                       std::size_t G, const std::function<float(std::uint64_t, std::uint64_t)>& got,
                       const std::string& what);

}  // namespace phasebench::reference
