#pragma once
// The reference of a weight-only FP4 linear layer (ops/linear_fp4.hpp): its
// seeded packed weights (mxfp4 or nvfp4), their exactly dequantised rows and the
// check of sampled outputs.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "phasebench/ops/linear_fp4.hpp"

namespace phasebench::reference {

// The weights of Fp4Layout `l`, seeded: every nibble of `values` uniform over the
// 16 e2m1 codes (both zeros included); block scales in a small range, so that the
// weights stay O(1): mxfp4 e8m0 codes 123..126 (2^-4 .. 2^-1), nvfp4 e4m3 values
// in [1/8, 1/2); nvfp4's tensor scale a float in [1/4, 3/4) with a full mantissa
// (*tensor_scale; 1 for mxfp4, which has none).
void fill_fp4(const Fp4Layout& l, std::uint8_t* values, std::uint8_t* scales, float* tensor_scale, std::uint64_t seed);
// Row n of W without the tensor scale: K floats e2m1 * block scale, each exact in
// fp32 (2 significant bits times a power of two or a 4-bit e4m3).
std::vector<float> fp4_weight_row(const Fp4Layout& l, const std::uint8_t* values, const std::uint8_t* scales,
                                  std::uint64_t n);
// Checks an FP4 linear layer's output at `positions` (m, n): `got(m, n)` against
// tensor_scale * sum_k x[m,k] w[n,k], accumulated in double (linear_element) over
// X's row m (M x K floats) and W's row n dequantised once; tolerance_for(the
// format), scaled by each element's sum |x*w|. Throws VerificationError naming `what`.
void check_fp4_linear(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& positions, const float* X,
                      const Fp4Layout& l, const std::uint8_t* values, const std::uint8_t* scales, float tensor_scale,
                      const std::function<float(std::uint64_t, std::uint64_t)>& got, const std::string& what);

}  // namespace phasebench::reference
