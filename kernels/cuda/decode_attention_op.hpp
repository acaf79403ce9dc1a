#pragma once
// Decode attention's operation on CUDA (kinds decode_attention and decode_attention_paged):
// its buffers, filled from its request's seed, and its verification against the CPU
// reference. Our kernels' row is this class (decode_attention.cu); a library's row
// (decode_attention_flashinfer.cu) derives from it and runs its own kernels over the
// same buffers, so every row reads the same bytes and is checked the same way.
#include <string>
#include <vector>

#include "cuda/attention_ops.hpp"
#include "cuda/decode_attention.hpp"
#include "cuda/decode_attention_plan.hpp"

namespace phasebench::cuda {

class DecodeAttentionOp : public AttentionOpBase {
 public:
  // Allocates and fills q, the cache (contiguous or its page pool and block table),
  // the fp8 scales, the ragged lengths and the plan's split-KV workspace.
  DecodeAttentionOp(Context& ctx, const OpRequest& r, const DecodeAttentionPlan& plan);
  void run() override;  // our kernels
  // run(), then every sampled query row against the reference.
  void verify() override;
  int splits() const override { return p_.splits; }

 protected:
  const DeviceBuffer& output() const override { return out_; }
  // The request in words, for verification messages.
  virtual std::string shape() const;
  // The dtype's tolerance is multiplied by this: 1 for ours (fp32 partials); a library
  // that rounds more on the way (FlashInfer's 16-bit split-KV partials) says how much.
  virtual double tolerance_scale() const { return 1.0; }

  bool paged_;
  DType kv_t_;
  std::vector<int> lengths_;  // each sequence's context when ragged, else empty
  int chunk_ = 1;
  DeviceBuffer q_, out_, k_, v_, ws_, scales_, lengths_dev_;
  BlockTable pool_;  // paged only
  DecodeAttentionParams p_;  // pointed at this op's buffers
};

}  // namespace phasebench::cuda
