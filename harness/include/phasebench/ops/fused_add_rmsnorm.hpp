#pragma once
// The fused residual add and RMSNorm of a decode step (harness/src/ops/
// fused_add_rmsnorm.cpp), as engines run it between a layer's blocks (vLLM's
// fused_add_rms_norm, FlashInfer's fused_add_rmsnorm), out of place so that
// repeated runs see the same data:
//   residual_out[m, :] = x[m, :] + residual[m, :]
//   y[m, :]            = residual_out[m, :] / sqrt(mean_j residual_out[m, j]^2 + eps) * weight[:]
// x, residual, residual_out and y [M, h], weight [h]; storage in the request's
// dtype, fp32 math. Like every elementwise op it counts 0 FLOPs (workload.hpp).
#include <cstdint>

#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kFusedAddRmsnorm = "fused_add_rmsnorm";

// A fused add + RMSNorm request's options (OpRequest::options).
struct FusedAddRmsnormOptions {
  float eps = 1e-6f;
};

// M tokens (the decode batch) of hidden size h.
OpRequest fused_add_rmsnorm_request(std::uint64_t M, std::uint64_t h, DType dtype, std::uint64_t seed = 0x5eed);

}  // namespace phasebench
