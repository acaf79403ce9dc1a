// The fused residual add and RMSNorm's reference (fused_add_rmsnorm.hpp).
#include "reference/fused_add_rmsnorm.hpp"

#include <cmath>

namespace phasebench::reference {

void fused_add_rmsnorm_row(const float* x, const float* residual, const float* weight, std::size_t h, double eps,
                           double* residual_out, double* y) {
  double ss = 0;
  for (std::size_t j = 0; j < h; ++j) {
    residual_out[j] = static_cast<double>(x[j]) + static_cast<double>(residual[j]);
    ss += residual_out[j] * residual_out[j];
  }
  const double inv_rms = 1.0 / std::sqrt(ss / static_cast<double>(h) + eps);
  for (std::size_t j = 0; j < h; ++j) y[j] = residual_out[j] * inv_rms * static_cast<double>(weight[j]);
}

}  // namespace phasebench::reference
