#pragma once
// Prefill attention's operation on CUDA (kind prefill_attention): q, k, v filled from
// its request's seed, out, and the verification against the CPU reference. Our flash
// kernel and the cuBLAS path are this class (prefill_attention.cu); a library's row
// (prefill_attention_flashinfer.cu, prefill_attention_cudnn.*) derives from it and runs
// its own kernels over the same buffers, checked the same way.
#include <cstddef>
#include <string>

#include "cuda/attention_ops.hpp"
#include "cuda/prefill_attention.hpp"
#include "cuda/prefill_attention_plan.hpp"

namespace phasebench::cuda {

class PrefillAttentionOp : public AttentionOpBase {
 public:
  // Allocates and fills q, k, v ([B, S, H, D]) and out; the cuBLAS path's scores and pointers.
  PrefillAttentionOp(Context& ctx, const OpRequest& r, const PrefillAttentionPlan& plan);
  void run() override;  // our flash kernel, or the cuBLAS path
  // run(), then rows around every tile edge of a few (batch, head) pairs against the reference.
  void verify() override;

 protected:
  const DeviceBuffer& output() const override { return out_; }
  // The request in words, for verification messages.
  virtual std::string shape() const;

  bool blas_;
  std::size_t q_elems_ = 0, kv_elems_ = 0;
  DeviceBuffer q_, k_, v_, out_, scores_, blas_ptrs_;  // blas_ptrs_: the cuBLAS path's pointer arrays
  PrefillAttentionParams p_;  // pointed at this op's buffers
};

}  // namespace phasebench::cuda
