// The linear layer's reference (linear.hpp): a dot product in double.
#include "reference/linear.hpp"

#include <cmath>

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

}  // namespace phasebench::reference
