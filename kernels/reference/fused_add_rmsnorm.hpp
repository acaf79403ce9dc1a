#pragma once
// The reference of the fused residual add and RMSNorm (ops/fused_add_rmsnorm.hpp):
// one row in double.
#include <cstddef>

namespace phasebench::reference {

// residual_out[j] = x[j] + residual[j]; y[j] = residual_out[j] / sqrt(mean residual_out^2 + eps) * weight[j], j < h.
void fused_add_rmsnorm_row(const float* x, const float* residual, const float* weight, std::size_t h, double eps,
                           double* residual_out, double* y);

}  // namespace phasebench::reference
