// The linear layer's reference (linear.hpp): a dot product in double, and the
// block-scaled 4-bit operands dequantised exactly.
#include "reference/linear.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "common/numeric.hpp"

namespace phasebench::reference {

double linear_element(const float* X, const float* W, std::size_t K, std::size_t m, std::size_t n, double* abs_sum) {
  double acc = 0, abs_acc = 0;
  const float* x = X + m * K;
  const float* w = W + n * K;
  for (std::size_t k = 0; k < K; ++k) {
    const double p = static_cast<double>(x[k]) * static_cast<double>(w[k]);
    acc += p;
    abs_acc += std::fabs(p);
  }
  if (abs_sum) *abs_sum = abs_acc;
  return acc;
}

std::vector<float> dequantize_block_scaled(DType t, const std::uint8_t* codes, const std::uint8_t* scales,
                                           std::size_t rows, std::size_t cols) {
  const auto bs = block_scaling(t);
  if (!bs) throw std::logic_error("dequantize_block_scaled: " + std::string(to_string(t)) + " is not block-scaled");
  if (cols % 2) throw std::logic_error("dequantize_block_scaled: rows of an odd number of 4-bit values");
  const std::size_t blocks = (cols + bs->block - 1) / bs->block;
  std::vector<float> out(rows * cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const std::uint8_t s = scales[r * blocks + c / bs->block];
      const float scale = t == DType::nvfp4 ? numeric::fp8e4m3_to_float(s) : numeric::e8m0_to_float(s);
      out[r * cols + c] = numeric::fp4e2m1_to_float(numeric::nibble(codes + r * (cols / 2), c)) * scale;
    }
  return out;
}

}  // namespace phasebench::reference
