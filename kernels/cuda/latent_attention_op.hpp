#pragma once
// MLA decode attention's operation on CUDA (kinds latent_attention and
// latent_attention_paged): q and the latent cache filled from its request's seed, out,
// and the verification against the reference. Our kernels' row is this class
// (latent_attention.cu); FlashInfer's (latent_attention_flashinfer.cu) derives from it
// and runs its MLA kernels over the same buffers, checked the same way.
#include <string>

#include "cuda/attention_ops.hpp"
#include "cuda/latent_attention.hpp"
#include "cuda/latent_attention_plan.hpp"

namespace phasebench::cuda {

class LatentAttentionOp : public AttentionOpBase {
 public:
  // Allocates and fills q [B, H, 576], the cache ([B, L, 576] or its pages and block
  // table), out [B, H, 512] and the plan's split-KV workspace.
  LatentAttentionOp(Context& ctx, const OpRequest& r, const LatentAttentionPlan& plan);
  void run() override;  // our kernels
  // run(), then sampled sequences and heads against the reference.
  void verify() override;
  int splits() const override { return p_.splits; }

 protected:
  const DeviceBuffer& output() const override { return out_; }
  // The request in words, for verification messages.
  virtual std::string shape() const;

  bool paged_;
  int B_ = 0, H_ = 0, L_ = 0;
  DeviceBuffer q_, out_, cache_, ws_;
  BlockTable pool_;  // paged only
  LatentParams p_{};  // pointed at this op's buffers
};

}  // namespace phasebench::cuda
