#pragma once
// The reference of a linear layer (ops/linear.hpp): one output element of
// Y = X W^T in double, with the |x*w| sum its tolerance scales by; and the exact
// dequantisation of block-scaled 4-bit operands (nvfp4, mxfp4) for it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "phasebench/dtype.hpp"

namespace phasebench::reference {

// Y[m,n] of Y = X W^T (X is M x K, W is N x K, row-major). Returns the value
// and, in *abs_sum, sum |x*w| for the tolerance.
double linear_element(const float* X, const float* W, std::size_t K, std::size_t m, std::size_t n, double* abs_sum);

// `rows` rows of a block-scaled 4-bit matrix of type `t` (nvfp4, mxfp4; block_scaling)
// with `cols` values each, dequantised: value x its block's scale. `codes` holds each
// row's e2m1 values packed two a byte, the first in the low nibble, rows starting
// on whole bytes (cols / 2 bytes apart; `cols` even); `scales` each row's
// ceil(cols / block) scales in order (nvfp4: e4m3, whose sign bit must be clear;
// mxfp4: e8m0). nvfp4's tensor scale is not applied: a caller multiplies the dot
// product by it, so every value here is exact in float (an e2m1 value has 2
// significant bits, a scale at most 4). Row-major, rows x cols.
std::vector<float> dequantize_block_scaled(DType t, const std::uint8_t* codes, const std::uint8_t* scales,
                                           std::size_t rows, std::size_t cols);

}  // namespace phasebench::reference
