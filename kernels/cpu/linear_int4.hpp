#pragma once
// The CPU backend's int4 decode GEMV (linear_int4.cpp): multi-threaded
// (OpenMP) loops written to stream memory; layouts as the CUDA kernels'
// (docs/design.md, kernels/backend.hpp).
#include <cstdint>

#include "cpu/linear.hpp"

namespace phasebench::cpu {

// decode_gemv (linear.hpp) with W weight-only int4 (ops/linear_int4.hpp's packed layout, groups
// of G = 32..256 along K), X and Y bf16, fp32 accumulation.
void decode_gemv_int4(const std::uint16_t* X, const std::uint8_t* q, const std::uint16_t* scales,
                      const std::uint8_t* zeros, std::uint16_t* Y, std::uint64_t M, std::uint64_t N, std::uint64_t K,
                      std::uint64_t G);

}  // namespace phasebench::cpu
