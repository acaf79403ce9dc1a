#pragma once
// The weight-only FP4 linear layer (harness/src/ops/linear_fp4.cpp): Y[M,N] =
// X[M,K] W^T with W stored as block-scaled 4-bit floats (e2m1 values), in one of
// two formats: MXFP4 (OCP MX: an e8m0 scale per 32 consecutive weights along K;
// gpt-oss's experts) or NVFP4 (an e4m3 scale per 16, and one fp32 scale for the
// whole matrix): w = e2m1 * block scale (* tensor scale). X and Y are bf16; the
// weights are widened in registers and the products accumulate in fp32
// (weight-only: no FP4 tensor cores, so it runs on every GPU we build for).
#include <cstdint>
#include <string>
#include <string_view>

#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kLinearFp4 = "linear_fp4";

// The packed layout every backend uses, so that its bytes are exactly
// matrix_bytes(format, N, K) (values, block scales, tensor scale):
// values [N][K/2] bytes, weight k of row n in the low nibble of byte k/2 of the
// row when k is even, the high nibble when odd; block scales [N][K/block] bytes
// (e8m0 for mxfp4, e4m3 for nvfp4), row-major (not the swizzled layout FP4
// tensor-core GEMMs read); nvfp4's tensor scale one fp32.
struct Fp4Layout {
  DType format = DType::mxfp4;  // mxfp4 or nvfp4
  std::uint64_t N = 0, K = 0;
  std::uint64_t block() const;                // 32 (mxfp4) or 16 (nvfp4)
  std::uint64_t value_bytes() const;          // N*K/2
  std::uint64_t scale_bytes() const;          // N*K/block
  std::uint64_t tensor_scale_bytes() const;   // 4 (nvfp4) or 0
  std::uint64_t total_bytes() const { return value_bytes() + scale_bytes() + tensor_scale_bytes(); }
};

// The format a word names: "mxfp4" or "nvfp4"; InputError otherwise.
DType parse_fp4_format(std::string_view word);
// The weight format for costs: WeightFormat::parse's (exactly matrix_bytes), computing in
// bf16 (weight-only: the roofline of the activations' type, not an FP4 ceiling).
WeightFormat fp4_weight_format(DType format);
// InputError unless `format` is mxfp4 or nvfp4 and its block divides K: a partial
// block would need a scale of its own and a tail the kernels do not take.
void check_fp4_shape(const LinearShape& s, DType format);

// An FP4 linear request's options (OpRequest::options).
struct LinearFp4Options {
  DType format = DType::mxfp4;
};

OpRequest linear_fp4_request(const LinearShape& s, DType format, Impl impl, std::uint64_t seed = 0x5eed);

}  // namespace phasebench
