#pragma once
// The MoE experts operation on CUDA (moe.cu): the library row, cuBLAS's
// grouped GEMM (cublasGemmGroupedBatchedEx) per projection, with our permute,
// SiLU*up and combine kernels around it.

namespace phasebench::cuda {

// Test access to a prepared MoE op: with fault injection on, verify() zeroes
// the last token's output row after the run, which verification must catch.
class MoeOpAccess {
 public:
  virtual ~MoeOpAccess() = default;
  virtual void set_fault_injection(bool on) = 0;
};

}  // namespace phasebench::cuda
