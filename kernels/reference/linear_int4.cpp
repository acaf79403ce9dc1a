// The int4 linear layer's reference (linear_int4.hpp): the packed weights'
// fill and dequantization, and the check against linear_element.
#include "reference/linear_int4.hpp"

#include <cmath>
#include <map>

#include "common/numeric.hpp"
#include "reference/common.hpp"
#include "reference/linear.hpp"

namespace phasebench::reference {

void fill_int4(std::uint8_t* q, std::uint16_t* scales, std::uint8_t* zeros, std::size_t N, std::size_t K, std::size_t G,
               std::uint64_t seed) {
  auto byte = [](std::uint64_t sd, std::uint64_t i) { return static_cast<std::uint8_t>(numeric::mix64(sd ^ numeric::mix64(i)) >> 24); };
  const std::size_t groups = N * (K / G);
  for (std::size_t i = 0; i < N * K / 2; ++i) q[i] = byte(seed, i);
  for (std::size_t i = 0; i < groups; ++i)
    scales[i] = numeric::float_to_bf16(std::fabs(numeric::random_value(seed + 1, i, 0.125f)));
  for (std::size_t i = 0; i < (groups + 1) / 2; ++i) zeros[i] = byte(seed + 2, i);
}

std::vector<float> int4_weight_row(const std::uint8_t* q, const std::uint16_t* scales, const std::uint8_t* zeros,
                                   std::size_t n, std::size_t K, std::size_t G) {
  std::vector<float> w(K);
  for (std::size_t k = 0; k < K; ++k) {
    const std::size_t gi = n * (K / G) + k / G;
    const int qv = static_cast<int>(numeric::nibble(q, n * K + k)), zv = static_cast<int>(numeric::nibble(zeros, gi));
    w[k] = static_cast<float>(qv - zv) * numeric::bf16_to_float(scales[gi]);
  }
  return w;
}

void check_int4_linear(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& positions, const float* X,
                       const std::uint8_t* q, const std::uint16_t* scales, const std::uint8_t* zeros, std::size_t K,
                       std::size_t G, const std::function<float(std::uint64_t, std::uint64_t)>& got,
                       const std::string& what) {
  std::map<std::uint64_t, std::vector<float>> rows;  // W's rows in use, dequantized once
  std::vector<float> g;
  std::vector<double> want, scale;
  for (const auto& [m, n] : positions) {
    auto it = rows.find(n);
    if (it == rows.end()) it = rows.emplace(n, int4_weight_row(q, scales, zeros, n, K, G)).first;
    double abs_sum = 0;
    want.push_back(linear_element(X + m * K, it->second.data(), K, 0, 0, &abs_sum));
    scale.push_back(abs_sum);
    g.push_back(got(m, n));
  }
  check_close(g, want, tolerance_for(DType::bf16), what, &scale);
}

}  // namespace phasebench::reference
