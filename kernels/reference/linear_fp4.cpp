// The FP4 linear layer's reference (linear_fp4.hpp): the packed weights' fill and
// exact dequantisation, and the check against linear_element (double).
#include "reference/linear_fp4.hpp"

#include <cmath>
#include <map>

#include "common/numeric.hpp"
#include "reference/common.hpp"
#include "reference/linear.hpp"

namespace phasebench::reference {

namespace {

std::uint64_t hash(std::uint64_t seed, std::uint64_t i) { return numeric::mix64(seed ^ numeric::mix64(i)); }

float block_scale(const Fp4Layout& l, std::uint8_t code) {
  return l.format == DType::nvfp4 ? numeric::fp8e4m3_to_float(code) : numeric::e8m0_to_float(code);
}

}  // namespace

void fill_fp4(const Fp4Layout& l, std::uint8_t* values, std::uint8_t* scales, float* tensor_scale, std::uint64_t seed) {
  for (std::uint64_t i = 0; i < l.value_bytes(); ++i) values[i] = static_cast<std::uint8_t>(hash(seed, i) >> 24);
  const std::uint64_t blocks = l.scale_bytes();
  for (std::uint64_t i = 0; i < blocks; ++i) {
    if (l.format == DType::nvfp4)
      scales[i] = numeric::float_to_fp8e4m3(std::fabs(numeric::random_value(seed + 1, i, 0.5f)));  // [1/8, 1/2)
    else
      scales[i] = static_cast<std::uint8_t>(123 + (hash(seed + 1, i) >> 40) % 4);  // 2^-4 .. 2^-1
  }
  *tensor_scale = 1.0f;
  if (l.format == DType::nvfp4) {
    // Not a power of two, as a quantiser makes it (amax / (6 * 448)), and far
    // enough from 1 that leaving it out fails verification: [1/4, 3/4).
    *tensor_scale = 0.25f + 0.5f * static_cast<float>(hash(seed + 2, 0) >> 40) * (1.0f / 16777216.0f);
  }
}

std::vector<float> fp4_weight_row(const Fp4Layout& l, const std::uint8_t* values, const std::uint8_t* scales,
                                  std::uint64_t n) {
  const std::uint64_t K = l.K, B = l.block();
  std::vector<float> w(K);
  for (std::uint64_t k = 0; k < K; ++k)
    w[k] = numeric::fp4e2m1_to_float(numeric::nibble(values, n * K + k)) * block_scale(l, scales[n * (K / B) + k / B]);
  return w;
}

void check_fp4_linear(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& positions, const float* X,
                      const Fp4Layout& l, const std::uint8_t* values, const std::uint8_t* scales, float tensor_scale,
                      const std::function<float(std::uint64_t, std::uint64_t)>& got, const std::string& what) {
  std::map<std::uint64_t, std::vector<float>> rows;  // W's rows in use, dequantised once
  std::vector<float> g;
  std::vector<double> want, scale;
  const double ts = tensor_scale;
  for (const auto& [m, n] : positions) {
    auto it = rows.find(n);
    if (it == rows.end()) it = rows.emplace(n, fp4_weight_row(l, values, scales, n)).first;
    double abs_sum = 0;
    want.push_back(ts * linear_element(X + m * l.K, it->second.data(), l.K, 0, 0, &abs_sum));
    scale.push_back(ts * abs_sum);
    g.push_back(got(m, n));
  }
  check_close(g, want, tolerance_for(l.format), what, &scale);
}

}  // namespace phasebench::reference
