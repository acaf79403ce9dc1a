#pragma once
// Checks a linear layer's output Y[M,N] = X[M,K] W^T, computed on the device,
// against reference::linear_element on the inputs downloaded from the device.
// Shared by the cuBLASLt linear and our decode GEMV; the block-scaled 4-bit
// operands (nvfp4, mxfp4) of cuBLASLt's block-scaled matmul, their fill and
// their check, are here too.
#include <cuda_runtime.h>

#include <cstdint>
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

// ---- block-scaled 4-bit operands (nvfp4, mxfp4) ------------------------------------
//
// A matrix of R rows of K values (X: M rows, W: N rows; K the reduction dimension)
// as cuBLASLt's block-scaled matmul reads it: the e2m1 values row-major, two a byte,
// the first in the low nibble (a row is K / 2 bytes), and one block scale per
// `block` consecutive values of a row (block_scaling: nvfp4 an e4m3 per 16, mxfp4
// an e8m0 per 32), C = ceil(K / block) of them per row, in the tiled layout cuBLAS
// documents ("1D Block Scaling Factors Layout"): the R x C scales padded to
// multiples of 128 rows and 4 columns and cut into 128 x 4 tiles of 512 bytes,
// stored tile after tile with a tile row's tiles (along K) adjacent; inside its
// tile the scale of row r and column c lies at (r % 32) * 16 + (r % 128) / 32 * 4 + c % 4.
// nvfp4 also has an fp32 scale per tensor, which cuBLASLt's block-scaled matmul
// takes in alpha.

// Bytes of the scale tensor of `rows` rows of `scale_cols` scales (padding included).
std::uint64_t block_scale_tensor_bytes(std::uint64_t rows, std::uint64_t scale_cols);
// Where the scale of row `row`, scale column `col` lies in that tensor.
std::uint64_t block_scale_offset(std::uint64_t row, std::uint64_t col, std::uint64_t scale_cols);

// X and W of type `t` with their scale tensors, filled from `seed` (X) and `seed + 1`
// (W): random non-zero e2m1 values with random signs, block scales in a small range
// (nvfp4: e4m3 0.25 to 3.75; mxfp4: e8m0 2^-2 to 2^2; the padding 0), and for nvfp4
// tensor scales of 0.5 to 0.9375 (four significant bits: their product is exact in
// fp32); Y (bf16) filled with 0xff bytes. K must be even.
struct BlockScaledOperands {
  DType type = DType::nvfp4;
  DeviceBuffer X, W, X_scales, W_scales, Y;
  float x_tensor_scale = 1, w_tensor_scale = 1;  // nvfp4's per-tensor scales; 1 for mxfp4
};
BlockScaledOperands make_block_scaled_operands(const LinearShape& s, DType t, std::uint64_t seed, cudaStream_t stream);

// verify_linear for block-scaled operands: the sampled rows of X and W and their
// scales downloaded, dequantised exactly (reference::dequantize_block_scaled), the
// dot products times both tensor scales against Y.
void verify_linear_block_scaled(const LinearShape& s, const BlockScaledOperands& o, cudaStream_t stream,
                                const std::string& what);

}  // namespace phasebench::cuda
