// Decode attention through FlashInfer (impl:flashinfer): its batch decode over a paged KV
// cache (BatchDecodeWithPagedKVCacheDispatched, the CUDA-core kernel vLLM and SGLang run
// for decode with small GQA groups, planned by its DecodePlan), reading the very buffers
// our row reads: our page pool is FlashInfer's HND layout ([pages, Hkv, page, D]), so only
// the block table is converted to its indptr / indices / last-page lengths, once, outside
// the timed region. The contiguous cache [B, Hkv, L, D] is the same call with one page of
// L tokens per sequence (FlashInfer has no batched contiguous decode entry point).
// Verified against the same reference as our kernels (DecodeAttentionOp::verify).
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/attention_flashinfer.cuh"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/decode_attention_op.hpp"
#include "cuda/decode_attention_plan.hpp"
#include "cuda/dispatch.cuh"
#include "phasebench/error.hpp"
#include "phasebench/ops/decode_attention.hpp"

namespace phasebench::cuda {

namespace {

using namespace flashinfer_rows;  // workspaces, check, at, dispatch (attention_flashinfer.cuh)

// Softmax with no custom mask, sliding window, logit soft cap or ALiBi: plain attention.
using Variant = flashinfer::DefaultAttention<false, false, false, false>;
template <class T>
using Params = flashinfer::BatchDecodeParams<T, T, T, std::int32_t>;

// Why FlashInfer's batch decode cannot take the request, or nothing.
std::optional<std::string> flashinfer_decode_unsupported(const OpRequest& r) {
  const auto a = AttentionShape::of(r.shape);
  const auto& o = r.options.as<DecodeAttentionOptions>();
  if (r.dtype != DType::bf16 && r.dtype != DType::fp16)
    return "FlashInfer decode: dtype " + std::string(to_string(r.dtype)) + " is not built here; use bf16 or fp16";
  if (o.kv_fp8)
    return std::string(
        "FlashInfer decode: its fp8 cache takes one K and one V scale per tensor (folded into sm_scale and the "
        "output); ours has one per KV head, so the two rows would not compute the same attention");
  if (a.D != 64 && a.D != 128 && a.D != 256)
    return "FlashInfer decode: head_dim " + std::to_string(a.D) + " is not instantiated here (64, 128, 256)";
  if (a.Hkv == 0 || a.Hq % a.Hkv != 0) return std::string("FlashInfer decode: query heads must be a multiple of kv heads");
  const auto G = a.Hq / a.Hkv;
  if (G != 1 && G != 2 && G != 3 && G != 4 && G != 8)
    return "FlashInfer decode: its CUDA-core batch decode takes GQA groups 1, 2, 3, 4 and 8, not " + std::to_string(G) +
           " (FlashInfer runs other groups through its tensor-core prefill kernel, not measured here)";
  if (decode_attention_new_tokens(r) > 1)
    return std::string("FlashInfer decode: one new token per sequence (multi-token steps run its prefill kernels)");
  return std::nullopt;
}

// FlashInfer's plan of a request: ours (buffers, lengths) with no split of our own,
// and its workspaces as scratch.
struct FlashInferDecodePlan : DecodeAttentionPlan {};

std::shared_ptr<const FlashInferDecodePlan> plan_flashinfer_decode(const OpRequest& r, const Context& ctx) {
  auto ours = plan_decode_attention(r, ctx);  // the buffers' dimensions and our limits of the layout
  auto why = flashinfer_decode_unsupported(r);
  if (!why && ours->unsupported) why = ours->unsupported;
  return make_plan<FlashInferDecodePlan>(why, [&](FlashInferDecodePlan& plan) {
    static_cast<DecodeAttentionPlan&>(plan) = *ours;
    plan.params.splits = 1;  // FlashInfer splits by its own plan, in its own workspace
    plan.split = SplitKvPlan{};
    plan.split.splits = 1;
    plan.scratch_bytes = kFloatWorkspaceBytes + kIntWorkspaceBytes;
  });
}

class FlashInferDecodeOp final : public DecodeAttentionOp {
 public:
  FlashInferDecodeOp(Context& ctx, const OpRequest& r, const FlashInferDecodePlan& plan)
      : DecodeAttentionOp(ctx, r, plan) {
    // FlashInfer's view of our cache: each sequence's pages (only those its context
    // uses), the tokens in its last page, and the pages' offsets in that list.
    const int B = p_.B;
    const int page = paged_ ? pool_.page_size : p_.L;  // contiguous: one page of L tokens a sequence
    std::vector<std::int32_t> indptr{0}, indices, last;
    for (int b = 0; b < B; ++b) {
      const int len = lengths_.empty() ? p_.L : lengths_[static_cast<std::size_t>(b)];
      const int pages = (len + page - 1) / page;
      for (int i = 0; i < pages; ++i)
        indices.push_back(paged_ ? pool_.host[static_cast<std::size_t>(b) * pool_.pages_per_seq + i] : b);
      indptr.push_back(static_cast<std::int32_t>(indices.size()));
      last.push_back(len - (pages - 1) * page);
    }
    indptr_ = DeviceBuffer(indptr.size() * sizeof(std::int32_t));
    indices_ = DeviceBuffer(indices.size() * sizeof(std::int32_t));
    last_ = DeviceBuffer(last.size() * sizeof(std::int32_t));
    upload(indptr_.get(), indptr.data(), indptr_.bytes(), ctx.stream);
    upload(indices_.get(), indices.data(), indices_.bytes(), ctx.stream);
    upload(last_.get(), last.data(), last_.bytes(), ctx.stream);
    float_ws_ = DeviceBuffer(kFloatWorkspaceBytes);
    int_ws_ = DeviceBuffer(kIntWorkspaceBytes);
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));

    dispatch(r.dtype, p_.D, "FlashInfer decode", [&](auto tag, auto d) {
      using T = decltype(tag);
      constexpr unsigned Dv = decltype(d)::value;
      using P = Params<T>;
      P params;
      params.q = static_cast<T*>(q_.get());
      params.o = static_cast<T*>(out_.get());
      params.lse = nullptr;
      params.num_qo_heads = static_cast<std::uint32_t>(p_.Hq);
      params.q_stride_n = p_.Hq * p_.D;  // q [B, Hq, D] (S = 1)
      params.q_stride_h = p_.D;
      params.window_left = -1;
      params.logits_soft_cap = 0.0f;
      params.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p_.D)));
      params.rope_rcp_scale = 1.0f;
      params.rope_rcp_theta = 1.0f / 1e4f;
      params.paged_kv = flashinfer::paged_kv_t<T, std::int32_t>(
          static_cast<std::uint32_t>(p_.Hkv), static_cast<std::uint32_t>(page), static_cast<std::uint32_t>(p_.D),
          static_cast<std::uint32_t>(B), flashinfer::QKVLayout::kHND, static_cast<T*>(k_.get()),
          static_cast<T*>(v_.get()), indices_.as<std::int32_t>(), indptr_.as<std::int32_t>(), last_.as<std::int32_t>());
      // DecodePlan reads the page offsets on the host; its work estimate is per GQA group.
      DISPATCH_GQA_GROUP_SIZE(p_.Hq / p_.Hkv, GROUP_SIZE, {
        auto estimate = flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<
            GROUP_SIZE, Dv, flashinfer::PosEncodingMode::kNone, Variant, P>;
        check(flashinfer::DecodePlan<Dv, flashinfer::PosEncodingMode::kNone, Variant, P>(
                     float_ws_.get(), kFloatWorkspaceBytes, int_ws_.get(), int_host_.get(), kIntWorkspaceBytes, info_,
                     indptr.data(), static_cast<std::uint32_t>(B), static_cast<std::uint32_t>(p_.Hq),
                     static_cast<std::uint32_t>(page), /*enable_cuda_graph=*/false, ctx.stream, estimate),
                 "DecodePlan");
      });
      char* iw = static_cast<char*>(int_ws_.get());
      params.request_indices = reinterpret_cast<std::int32_t*>(iw + info_.request_indices_offset);
      params.kv_tile_indices = reinterpret_cast<std::int32_t*>(iw + info_.kv_tile_indices_offset);
      params.o_indptr = reinterpret_cast<std::int32_t*>(iw + info_.o_indptr_offset);
      params.kv_chunk_size_ptr = reinterpret_cast<std::int32_t*>(iw + info_.kv_chunk_size_ptr_offset);
      params.block_valid_mask = nullptr;  // only with enable_cuda_graph
      params.padded_batch_size = static_cast<std::uint32_t>(info_.padded_batch_size);
      if (info_.split_kv) {
        tmp_v_ = static_cast<char*>(float_ws_.get()) + info_.v_offset;
        tmp_s_ = reinterpret_cast<float*>(static_cast<char*>(float_ws_.get()) + info_.s_offset);
      }
      run_ = [this, params]() {
        check(flashinfer::BatchDecodeWithPagedKVCacheDispatched<Dv, flashinfer::PosEncodingMode::kNone, Variant>(
                     params, static_cast<T*>(tmp_v_), tmp_s_, /*enable_pdl=*/false, ctx_.stream),
                 "BatchDecodeWithPagedKVCache");
      };
    });
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  }
  FlashInferDecodeOp(const FlashInferDecodeOp&) = delete;
  FlashInferDecodeOp& operator=(const FlashInferDecodeOp&) = delete;

  void run() override { run_(); }
  int splits() const override { return info_.split_kv ? 2 : 1; }
  // The entry point and what its plan chose, for the point's impl_detail.
  std::map<std::string, std::string> notes() const override {
    return {{"library", "flashinfer"},
            {"flashinfer_version", PHASEBENCH_FLASHINFER_VERSION},
            {"entry_point", "BatchDecodeWithPagedKVCacheDispatched (DecodePlan)"},
            {"page_size", std::to_string(paged_ ? pool_.page_size : p_.L) + (paged_ ? "" : " (one page per sequence)")},
            {"split_kv", info_.split_kv ? "yes" : "no"},
            {"padded_batch_size", std::to_string(info_.padded_batch_size)}};
  }

 protected:
  // FlashInfer keeps its split-KV partials in the output type (its tmp_v is DTypeO), so
  // each chunk's output is rounded to 16 bits at the chunk's own magnitude, about
  // sqrt(chunks) times the final row's (a mean over fewer keys), before the merge: its
  // rows carry that rounding beside the output's (seen under the emulation: one element
  // in 128 off by up to 12 bf16 ulps at split-KV, none without).
  double tolerance_scale() const override {
    if (!info_.split_kv) return 1.0;
    const double chunks = std::ceil(static_cast<double>(info_.padded_batch_size) / std::max(p_.B, 1));
    return 1.0 + std::sqrt(std::max(chunks, 1.0));
  }
  std::string shape() const override {
    return "FlashInfer " + DecodeAttentionOp::shape() + (info_.split_kv ? " (its split-KV plan)" : "");
  }

 private:
  DeviceBuffer indptr_, indices_, last_, float_ws_, int_ws_;
  PinnedBuffer int_host_{kIntWorkspaceBytes};  // its plan stages here
  void* tmp_v_ = nullptr;
  float* tmp_s_ = nullptr;
  flashinfer::DecodePlanInfo info_;
  std::function<void()> run_;
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(decode_attention_flashinfer) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  library_versions()["flashinfer"] = PHASEBENCH_FLASHINFER_VERSION;
  auto plan = [](const OpRequest& r, const Context& ctx) -> std::shared_ptr<const OpPlan> {
    return plan_flashinfer_decode(r, ctx);
  };
  for (const char* kind : {kDecodeAttention, kDecodeAttentionPaged})
    registry.add({kind, Impl::flashinfer, takes_16bit, {}, plan, prepare_op<FlashInferDecodeOp, FlashInferDecodePlan>()});
}
