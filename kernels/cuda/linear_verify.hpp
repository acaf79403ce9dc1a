#pragma once
// Checks a linear layer's output Y[M,N] = X[M,K] W^T, computed on the device,
// against reference::linear_element on the inputs downloaded from the device.
// Shared by the cuBLASLt linear and our decode GEMV.
#include <cuda_runtime.h>

#include <string>

#include "cuda/cuda_common.hpp"
#include "phasebench/dtype.hpp"
#include "phasebench/workload.hpp"

namespace phasebench::cuda {

struct LinearBuffers {
  const void* X = nullptr;  // M x K, row-major, `input` type
  const void* W = nullptr;  // N x K, row-major, `input` type
  const void* Y = nullptr;  // M x N, row-major, `output` type
};

// The device operands of a linear layer: X and W filled with random non-zero
// values (seeds `seed` and `seed + 1`), Y filled with 0xff bytes (NaN in every
// floating type) so that an element the kernel never writes fails verification.
struct LinearOperands {
  DeviceBuffer X, W, Y;
  LinearBuffers view() const { return {X.get(), W.get(), Y.get()}; }
};
LinearOperands make_linear_operands(const LinearShape& s, DType input, DType output, std::uint64_t seed,
                                    cudaStream_t stream);

// Compares every element when the reference is cheap (M*N*K <= 2^27), else a
// grid of up to 32 rows x 128 columns of Y that always includes the first and
// last rows and the first and last 16 columns (where tails live). Only the X
// and W rows that grid needs are downloaded. Throws VerificationError naming
// `what` and the first mismatch.
void verify_linear(const LinearShape& s, DType input, DType output, const LinearBuffers& b, cudaStream_t stream,
                   const std::string& what);

}  // namespace phasebench::cuda
