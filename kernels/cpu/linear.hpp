#pragma once
// The CPU backend's own decode GEMV (linear.cpp): multi-threaded
// (OpenMP) loops written to stream memory; layouts as the CUDA kernels'
// (docs/design.md, kernels/backend.hpp).
#include <cstdint>

#include "phasebench/dtype.hpp"

namespace phasebench::cpu {

// Largest batch (rows of X) the own GEMV handles in one pass over W.
inline constexpr std::uint64_t kMaxGemvBatch = 16;

// Y[M,N] = X[M,K] W^T for M <= kMaxGemvBatch; X, W, Y stored as `t` (fp32, bf16
// or fp16), fp32 accumulation. Every weight byte is read once per call.
void decode_gemv(const void* X, const void* W, void* Y, std::uint64_t M, std::uint64_t N, std::uint64_t K, DType t);

}  // namespace phasebench::cpu
