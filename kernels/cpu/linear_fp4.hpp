#pragma once
// The CPU backend's weight-only FP4 decode GEMV (linear_fp4.cpp): multi-threaded
// (OpenMP) loops written to stream memory; layouts as the CUDA kernels'
// (ops/linear_fp4.hpp's packed layout).
#include <cstdint>

#include "cpu/linear.hpp"
#include "phasebench/ops/linear_fp4.hpp"

namespace phasebench::cpu {

// decode_gemv (linear.hpp) with W weight-only FP4 in layout `l` (mxfp4 or nvfp4:
// values, block scales and the tensor scale), X and Y bf16 [M, K] and [M, N],
// fp32 accumulation; M = 1..kMaxGemvBatch.
void decode_gemv_fp4(const std::uint16_t* X, const Fp4Layout& l, const std::uint8_t* values,
                     const std::uint8_t* scales, float tensor_scale, std::uint16_t* Y, std::uint64_t M);

}  // namespace phasebench::cpu
