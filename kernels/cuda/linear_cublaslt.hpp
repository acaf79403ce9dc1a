#pragma once
// Linear layer Y[M,N] = X[M,K] W^T through cuBLASLt: bf16 and fp16 (fp32
// accumulation), fp32 (plain), tf32 (fp32 storage, tf32 tensor-core math) and
// fp8 e4m3 (inputs fp8, output bf16; compute capability 8.9 and up), with the
// algorithm cuBLASLt's heuristic picks for the context's workspace.
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
// cc_major.cc_minor (fp8 before 8.9, fp8 with K or N not multiples of 16, int8), or nothing.
std::optional<std::string> cublaslt_linear_unsupported(DType t, const LinearShape& s, int cc_major, int cc_minor);

// One configured matmul (descriptors, layouts and the heuristic's algorithm),
// bound to fixed device pointers; run() only enqueues cublasLtMatmul.
class CublasLtLinear {
 public:
  CublasLtLinear(Context& ctx, DType t, const LinearShape& s, const void* X, const void* W, void* Y);
  ~CublasLtLinear();
  CublasLtLinear(const CublasLtLinear&) = delete;
  CublasLtLinear& operator=(const CublasLtLinear&) = delete;
  void run();
  const std::string& describe() const { return description_; }

 private:
  void configure(DType t, const LinearShape& s);
  void release();
  Context& ctx_;
  const void* X_;
  const void* W_;
  void* Y_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulHeuristicResult_t algo_{};
  DeviceBuffer unit_scale_;  // fp8: the A and B scale factors, 1.0f
  std::string description_;
};

}  // namespace phasebench::cuda
