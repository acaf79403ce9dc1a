// Prefill attention through FlashInfer (impl:flashinfer): its FlashAttention-2 templates
// (mma.sync, the path vLLM and SGLang run on Ampere and, for FA2 backends, on Hopper),
// causal, over the very q, k, v our rows read ([B, S, H, D], FlashInfer's NHD layout).
// One request: SinglePrefillWithKVCacheDispatched; a batch: BatchPrefillWithRaggedKVCache
// with its PrefillPlan over qo/kv offsets b*S (the plan and its copies outside the timed
// region). Verified against the same reference as our kernel (PrefillAttentionOp::verify).
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/attention_flashinfer.cuh"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/dispatch.cuh"
#include "cuda/prefill_attention_op.hpp"
#include "cuda/prefill_attention_plan.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/prefill_attention.hpp"

namespace phasebench::cuda {

namespace {

using namespace flashinfer_rows;  // workspaces, check, at, dispatch (attention_flashinfer.cuh)

using Variant = flashinfer::DefaultAttention<false, false, false, false>;  // plain softmax attention
constexpr auto kNoRope = flashinfer::PosEncodingMode::kNone;
constexpr auto kCausal = flashinfer::MaskMode::kCausal;
constexpr bool kFp16QkReduction = false;  // fp32 scores, as ours

std::optional<std::string> flashinfer_prefill_unsupported(const OpRequest& r) {
  const auto s = PrefillAttentionShape::of(r.shape);
  if (r.dtype != DType::bf16 && r.dtype != DType::fp16)
    return "FlashInfer prefill: dtype " + std::string(to_string(r.dtype)) + " is not built here; use bf16 or fp16";
  if (s.D != 64 && s.D != 128 && s.D != 256)
    return "FlashInfer prefill: head_dim " + std::to_string(s.D) + " is not instantiated here (64, 128, 256)";
  if (s.Hkv == 0 || s.Hq % s.Hkv != 0) return std::string("FlashInfer prefill: query heads must be a multiple of kv heads");
  return std::nullopt;
}

// The single-request kernel splits the keys when its grid does not fill the GPU, into
// partials of (chunks x rows x D) outputs and an lse each; its chunk count is at most
// resident CTAs / (KV heads x query tiles), so the partials are at most the resident
// CTAs' rows: SMs x CTAs per SM (at most 8 here, with its shared memory) x 128 rows.
// FlashInfer's Python wrapper hands it a fixed 32 MiB; this bound is never smaller.
std::size_t single_tmp_bytes(const Context& ctx, int D, std::size_t es) {
  const std::size_t rows = static_cast<std::size_t>(std::max(ctx.sm_count, 1)) * 8 * 128;
  return std::max<std::size_t>(rows * (static_cast<std::size_t>(D) * es + sizeof(float)), std::size_t{32} << 20);
}

struct FlashInferPrefillPlan : PrefillAttentionPlan {};

std::shared_ptr<const FlashInferPrefillPlan> plan_flashinfer_prefill(const OpRequest& r, const Context& ctx) {
  // Our plan sizes the buffers; its flash-kernel limits are ours, not FlashInfer's.
  OpRequest own = r;
  own.impl = Impl::own;
  auto ours = plan_prefill_attention(own, ctx);
  auto why = flashinfer_prefill_unsupported(r);
  if (!why && ours->unsupported) why = ours->unsupported;
  return make_plan<FlashInferPrefillPlan>(why, [&](FlashInferPrefillPlan& plan) {
    static_cast<PrefillAttentionPlan&>(plan) = *ours;
    plan.blas = false;
    // A batch: its plan's workspaces. One request: the partials of its own KV split
    // (single_tmp_bytes).
    const auto s = PrefillAttentionShape::of(r.shape);
    plan.scratch_bytes = s.B > 1 ? kFloatWorkspaceBytes + kIntWorkspaceBytes
                                 : single_tmp_bytes(ctx, static_cast<int>(s.D), element_bytes(r.dtype));
  });
}

class FlashInferPrefillOp final : public PrefillAttentionOp {
 public:
  FlashInferPrefillOp(Context& ctx, const OpRequest& r, const FlashInferPrefillPlan& plan)
      : PrefillAttentionOp(ctx, r, plan) {
    const auto Hq = static_cast<std::uint32_t>(p_.Hq), Hkv = static_cast<std::uint32_t>(p_.Hkv),
               S = static_cast<std::uint32_t>(p_.S), D = static_cast<std::uint32_t>(p_.D);
    const float sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p_.D)));
    if (p_.B == 1) {
      entry_ = "SinglePrefillWithKVCache";
      tmp_ = DeviceBuffer(single_tmp_bytes(ctx, p_.D, element_bytes(r.dtype)));
      dispatch(r.dtype, p_.D, "FlashInfer prefill", [&](auto tag, auto d) {
        using T = decltype(tag);
        constexpr unsigned Dv = decltype(d)::value;
        using P = flashinfer::SinglePrefillParams<T, T, T>;
        // NHD: token stride H*D, head stride D; no custom mask, lse or ALiBi; no window.
        P params(static_cast<T*>(q_.get()), static_cast<T*>(k_.get()), static_cast<T*>(v_.get()), nullptr,
                 static_cast<T*>(out_.get()), nullptr, nullptr, Hq, Hkv, S, S, Hq * D, D, Hkv * D, D, D,
                 /*window_left=*/-1, /*logits_soft_cap=*/0.f, sm_scale, /*rope_scale=*/1.f, /*rope_theta=*/1e4f);
        run_ = [this, params]() {
          check(flashinfer::SinglePrefillWithKVCacheDispatched<Dv, Dv, kNoRope, kFp16QkReduction, kCausal, Variant>(
                       params, tmp_.as<T>(), ctx_.stream),
                   "SinglePrefillWithKVCache");
        };
      });
      return;
    }
    entry_ = "BatchPrefillWithRaggedKVCache";
    const auto B = static_cast<std::uint32_t>(p_.B);
    std::vector<std::int32_t> indptr(B + 1);
    for (std::uint32_t b = 0; b <= B; ++b) indptr[b] = static_cast<std::int32_t>(b * S);
    indptr_ = DeviceBuffer(indptr.size() * sizeof(std::int32_t));
    upload(indptr_.get(), indptr.data(), indptr_.bytes(), ctx.stream);
    float_ws_ = DeviceBuffer(kFloatWorkspaceBytes);
    int_ws_ = DeviceBuffer(kIntWorkspaceBytes);
    // The plan reads the offsets on the host (qo and kv alike: no cached prefix).
    check(flashinfer::PrefillPlan<std::int32_t>(
                 float_ws_.get(), kFloatWorkspaceBytes, int_ws_.get(), int_host_.get(), kIntWorkspaceBytes, info_,
                 indptr.data(), indptr.data(), B * S, B, Hq, Hkv, D, D, /*page_size=*/1, /*enable_cuda_graph=*/false,
                 static_cast<std::uint32_t>(element_bytes(r.dtype)), /*window_left=*/-1, /*fixed_split_size=*/-1,
                 /*disable_split_kv=*/false, /*num_colocated_ctas=*/0, ctx.stream),
             "PrefillPlan");
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    dispatch(r.dtype, p_.D, "FlashInfer prefill", [&](auto tag, auto d) {
      using T = decltype(tag);
      constexpr unsigned Dv = decltype(d)::value;
      using P = flashinfer::BatchPrefillRaggedParams<T, T, T, std::int32_t>;
      auto* ind = indptr_.as<std::int32_t>();
      P params(static_cast<T*>(q_.get()), static_cast<T*>(k_.get()), static_cast<T*>(v_.get()), nullptr, ind, ind,
               nullptr, nullptr, nullptr, static_cast<T*>(out_.get()), nullptr, nullptr, Hq, Hkv, Hq * D, D, Hkv * D,
               D, /*window_left=*/-1, /*logits_soft_cap=*/0.f, sm_scale, /*rope_scale=*/1.f, /*rope_theta=*/1e4f);
      char* iw = static_cast<char*>(int_ws_.get());
      char* fw = static_cast<char*>(float_ws_.get());
      params.request_indices = reinterpret_cast<std::int32_t*>(iw + info_.request_indices_offset);
      params.qo_tile_indices = reinterpret_cast<std::int32_t*>(iw + info_.qo_tile_indices_offset);
      params.kv_tile_indices = reinterpret_cast<std::int32_t*>(iw + info_.kv_tile_indices_offset);
      params.o_indptr = reinterpret_cast<std::int32_t*>(iw + info_.o_indptr_offset);
      params.kv_chunk_size_ptr = reinterpret_cast<std::int32_t*>(iw + info_.kv_chunk_size_ptr_offset);
      T* tmp_v = nullptr;
      float* tmp_s = nullptr;
      if (info_.split_kv) {
        params.merge_indptr = reinterpret_cast<std::int32_t*>(iw + info_.merge_indptr_offset);
        tmp_v = reinterpret_cast<T*>(fw + info_.v_offset);
        tmp_s = reinterpret_cast<float*>(fw + info_.s_offset);
      }
      params.padded_batch_size = static_cast<std::uint32_t>(info_.padded_batch_size);
      params.max_total_num_rows = static_cast<std::uint32_t>(info_.total_num_rows);
      const auto tile = info_.cta_tile_q;
      run_ = [this, params, tmp_v, tmp_s, tile]() {
        cudaError_t e = cudaSuccess;
        DISPATCH_CTA_TILE_Q(tile, CTA_TILE_Q, {
          e = flashinfer::BatchPrefillWithRaggedKVCacheDispatched<CTA_TILE_Q, Dv, Dv, kNoRope, kFp16QkReduction,
                                                                  kCausal, Variant>(params, tmp_v, tmp_s,
                                                                                    /*enable_pdl=*/false, ctx_.stream);
        });
        check(e, "BatchPrefillWithRaggedKVCache");
      };
    });
  }
  FlashInferPrefillOp(const FlashInferPrefillOp&) = delete;
  FlashInferPrefillOp& operator=(const FlashInferPrefillOp&) = delete;

  void run() override { run_(); }
  // The entry point and what its plan chose, for the point's impl_detail.
  std::map<std::string, std::string> notes() const override {
    std::map<std::string, std::string> n{{"library", "flashinfer"},
                                         {"flashinfer_version", PHASEBENCH_FLASHINFER_VERSION},
                                         {"entry_point", entry_ + "Dispatched"}};
    if (p_.B > 1) {
      n["cta_tile_q"] = std::to_string(info_.cta_tile_q);
      n["split_kv"] = info_.split_kv ? "yes" : "no";
      n["padded_batch_size"] = std::to_string(info_.padded_batch_size);
    }
    return n;
  }

 protected:
  std::string shape() const override { return "FlashInfer " + entry_ + ": " + PrefillAttentionOp::shape(); }

 private:
  std::string entry_;
  DeviceBuffer indptr_, float_ws_, int_ws_, tmp_;  // tmp_: one request's KV-split partials
  PinnedBuffer int_host_{kIntWorkspaceBytes};  // its plan stages here
  flashinfer::PrefillPlanInfo info_;
  std::function<void()> run_;
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(prefill_attention_flashinfer) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  library_versions()["flashinfer"] = PHASEBENCH_FLASHINFER_VERSION;
  registry.add({kPrefillAttention, Impl::flashinfer, takes_16bit, {},
                [](const OpRequest& r, const Context& ctx) -> std::shared_ptr<const OpPlan> {
                  return plan_flashinfer_prefill(r, ctx);
                },
                prepare_op<FlashInferPrefillOp, FlashInferPrefillPlan>()});
}
