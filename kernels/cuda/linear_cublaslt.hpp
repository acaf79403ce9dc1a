#pragma once
// Linear layer Y[M,N] = X[M,K] W^T through cuBLASLt: bf16 and fp16 (fp32
// accumulation), fp32 (plain), tf32 (fp32 storage, tf32 tensor-core math),
// fp8 e4m3 (inputs fp8, output bf16; compute capability 8.9 and up) and the
// block-scaled 4-bit nvfp4 and mxfp4 (X and W e2m1 with their block scales,
// output bf16; cuBLASLt's block-scaled matmul, compute capability 10.0 and up),
// with the algorithm cuBLASLt's heuristic picks for the context's workspace.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <string>

#include "backend.hpp"
#include "cuda/cuda_common.hpp"

namespace phasebench::cuda {

// (Y is stored as linear_output_type(t), harness/include/phasebench/dtype.hpp.)
// Why cuBLASLt cannot run this type/shape on a device of compute capability
// cc_major.cc_minor (fp8 before 8.9, fp8 with K or N not multiples of 16, int8;
// nvfp4/mxfp4 before 10.0, with K not a multiple of 32 or N not of 8), or nothing.
std::optional<std::string> cublaslt_linear_unsupported(DType t, const LinearShape& s, int cc_major, int cc_minor);

// The block scales of a block-scaled matmul (nvfp4, mxfp4): X's and W's scale
// tensors on the device (their layout: linear_verify.hpp) and alpha, which holds
// the product of nvfp4's two per-tensor scales (cuBLASLt's scale pointers hold the
// block scales in this mode, so the tensor scales have no pointer of their own).
struct BlockScales {
  const void* X_scales = nullptr;
  const void* W_scales = nullptr;
  float alpha = 1.0f;
};

// One configured matmul (descriptors, layouts and the heuristic's algorithm),
// bound to fixed device pointers; run() only enqueues cublasLtMatmul. A
// block-scaled type needs `scales`.
class CublasLtLinear {
 public:
  CublasLtLinear(Context& ctx, DType t, const LinearShape& s, const void* X, const void* W, void* Y,
                 const BlockScales* scales = nullptr);
  ~CublasLtLinear();
  CublasLtLinear(const CublasLtLinear&) = delete;
  CublasLtLinear& operator=(const CublasLtLinear&) = delete;
  void run();
  const std::string& describe() const { return description_; }

 private:
  void configure(DType t, const LinearShape& s, const BlockScales* scales);
  void release();
  Context& ctx_;
  const void* X_;
  const void* W_;
  void* Y_;
  float alpha_ = 1.0f;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulHeuristicResult_t algo_{};
  DeviceBuffer unit_scale_;  // fp8: the A and B scale factors, 1.0f
  std::string description_;
};

}  // namespace phasebench::cuda
