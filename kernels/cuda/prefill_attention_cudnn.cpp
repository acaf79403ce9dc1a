// Prefill attention's cuDNN row (Impl::cudnn): causal SDPA forward through cuDNN's
// frontend graph over the very q, k, v and out our rows use ([B, S, H, D], GQA by
// Hkv < Hq), its graph built into an execution plan once per point in the request's
// plan, its workspace the plan's scratch; verified as ours (PrefillAttentionOp::verify).
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>

#include "cuda/attention_cudnn.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/prefill_attention.hpp"
#include "cuda/prefill_attention_op.hpp"
#include "cuda/prefill_attention_plan.hpp"
#include "phasebench/ops/prefill_attention.hpp"

namespace phasebench::cuda {

namespace {

namespace fe = cudnn_frontend;

// The graph's tensors, by uid (the variant pack's keys).
enum Uid : std::int64_t { kQ = 1, kK = 2, kV = 3, kO = 4 };

// A request's plan: ours as PrefillAttentionOp takes it (the params, every pointer
// null; never the cuBLAS path), and the graph built for its shape and device.
struct PrefillCudnnPlan : PrefillAttentionPlan {
  CudnnSdpaGraph sdpa;
};

std::optional<std::string> request_unsupported(const OpRequest& r, const Context& ctx) {
  if (auto why = cudnn_sdpa_dtype_refusal(r.dtype)) return why;
  if (auto why = cudnn_sdpa_device_refusal(ctx.cc_major, ctx.cc_minor)) return why;
  const auto a = PrefillAttentionShape::of(r.shape);
  if (a.B == 0 || a.S == 0 || a.D == 0) return std::string("prefill attention: batch, prompt and head_dim must be >= 1");
  if (a.Hq == 0 || a.Hkv == 0 || a.Hq % a.Hkv != 0)
    return "prefill attention: query heads (" + std::to_string(a.Hq) + ") must be a positive multiple of kv heads (" +
           std::to_string(a.Hkv) + ")";
  return std::nullopt;
}

std::shared_ptr<const PrefillCudnnPlan> plan_prefill_attention_cudnn(const OpRequest& r, const Context& ctx) {
  return make_plan<PrefillCudnnPlan>(request_unsupported(r, ctx), [&](PrefillCudnnPlan& plan) {
    const auto a = PrefillAttentionShape::of(r.shape);
    // Every dimension fits in int: the check's 32-bit indexing.
    const auto B = static_cast<std::int64_t>(a.B), S = static_cast<std::int64_t>(a.S),
               Hq = static_cast<std::int64_t>(a.Hq), Hkv = static_cast<std::int64_t>(a.Hkv),
               D = static_cast<std::int64_t>(a.D);
    auto g = new_cudnn_sdpa_graph(r.dtype);
    auto Q = cudnn_tensor(*g, "Q", kQ, cudnn_bshd(B, S, Hq, D));
    auto K = cudnn_tensor(*g, "K", kK, cudnn_bshd(B, S, Hkv, D));
    auto V = cudnn_tensor(*g, "V", kV, cudnn_bshd(B, S, Hkv, D));
    // Causal with the diagonal at the top left (query i sees keys 0..i, as our
    // kernel and the reference), no statistics (inference), scale 1/sqrt(D).
    auto attrs = fe::graph::SDPA_attributes()
                     .set_name("prefill_attention")
                     .set_generate_stats(false)
                     .set_causal_mask(true)
                     .set_attn_scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))));
    auto outputs = g->sdpa(Q, K, V, attrs);
    cudnn_output(*outputs[0], kO, cudnn_bshd(B, S, Hq, D));
    std::ostringstream what;
    what << "prefill attention " << to_string(r.dtype) << " B=" << B << " S=" << S << " Hq=" << Hq << " Hkv=" << Hkv
         << " D=" << D;
    if (auto why = build_cudnn_sdpa(g, ctx, what.str(), plan.sdpa)) {
      plan.unsupported = why;
      return;
    }
    plan.scratch_bytes = plan.sdpa.workspace_bytes;
    plan.blas = false;
    plan.params = prefill_attention_params(r.dtype, nullptr, nullptr, nullptr, nullptr, static_cast<int>(B),
                                           static_cast<int>(S), static_cast<int>(Hq), static_cast<int>(Hkv),
                                           static_cast<int>(D));
  });
}

// The operation: our op's buffers, seeds and check (PrefillAttentionOp), cuDNN's
// execution of the graph in place of our kernel.
class PrefillAttentionCudnnOp final : public PrefillAttentionOp {
 public:
  PrefillAttentionCudnnOp(Context& ctx, const OpRequest& r, const PrefillCudnnPlan& plan)
      : PrefillAttentionOp(ctx, r, plan), sdpa_(plan.sdpa), ws_(plan.sdpa.workspace_bytes) {
    pack_ = {{kQ, q_.get()}, {kK, k_.get()}, {kV, v_.get()}, {kO, out_.get()}};
  }

  void run() override { run_cudnn_sdpa(sdpa_, pack_, ws_.get(), ctx_); }

  std::map<std::string, std::string> notes() const override { return cudnn_sdpa_notes(sdpa_); }

 protected:
  std::string shape() const override {
    std::ostringstream os;
    os << "prefill attention (cuDNN " << sdpa_.engine << ") " << to_string(r_.dtype) << " B=" << p_.B << " S=" << p_.S
       << " Hq=" << p_.Hq << " Hkv=" << p_.Hkv << " D=" << p_.D;
    return os.str();
  }

 private:
  CudnnSdpaGraph sdpa_;  // shared with the plan and the point's other copies; each op its own workspace
  DeviceBuffer ws_;
  std::unordered_map<std::int64_t, void*> pack_;  // device pointers by uid
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(prefill_attention_cudnn) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  register_cudnn_versions();
  registry.add({kPrefillAttention, Impl::cudnn, takes_16bit, {},
                [](const OpRequest& r, const Context& ctx) -> std::shared_ptr<const OpPlan> {
                  return plan_prefill_attention_cudnn(r, ctx);
                },
                prepare_op<PrefillAttentionCudnnOp, PrefillCudnnPlan>()});
}
