// MLA decode attention through FlashInfer (impl:flashinfer): its FA2-style MLA kernel
// (flashinfer/attention/mla.cuh, BatchMLAPagedAttention, which builds without CUTLASS;
// its Hopper and Blackwell MLA paths need CUTLASS/CuTe and are not built), planned by
// its MLAPlan, over the very buffers our row reads. Our latent cache holds each token's
// 512 compressed values and 64 rope values in one row of 576 ([pages, page, 576], or
// [B, L, 576] as one page of L tokens per sequence); FlashInfer reads ckv and kpe through
// their own strides, so both point into the same rows. Only the block table becomes its
// page offsets and indices (outside the timed region). Verified as ours is.
#include <flashinfer/attention/mla.cuh>
#include <flashinfer/attention/mla_params.cuh>
#include <flashinfer/attention/scheduler.cuh>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/attention_flashinfer.cuh"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/latent_attention_op.hpp"
#include "cuda/latent_attention_plan.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/latent_attention.hpp"

namespace phasebench::cuda {

namespace {

using namespace flashinfer_rows;  // workspaces, check, at, dispatch (attention_flashinfer.cuh)

constexpr int kW = kLatentRank + kLatentRopeDim;  // a latent row: 576

struct FlashInferMlaPlan : LatentAttentionPlan {};

std::shared_ptr<const FlashInferMlaPlan> plan_flashinfer_mla(const OpRequest& r, const Context& ctx) {
  auto ours = plan_latent_attention(r, ctx);  // the buffers' dimensions and the layout's limits
  std::optional<std::string> why = ours->unsupported;
  if (!why && r.dtype != DType::bf16 && r.dtype != DType::fp16)
    why = "FlashInfer MLA: dtype " + std::string(to_string(r.dtype)) + " is not built here; use bf16 or fp16";
  return make_plan<FlashInferMlaPlan>(why, [&](FlashInferMlaPlan& plan) {
    static_cast<LatentAttentionPlan&>(plan) = *ours;
    plan.split = SplitKvPlan{};  // FlashInfer splits by its own plan, in its own workspace
    plan.scratch_bytes = kFloatWorkspaceBytes + kIntWorkspaceBytes;
  });
}

class FlashInferMlaOp final : public LatentAttentionOp {
 public:
  FlashInferMlaOp(Context& ctx, const OpRequest& r, const FlashInferMlaPlan& plan) : LatentAttentionOp(ctx, r, plan) {
    const int page = paged_ ? pool_.page_size : L_;
    const int pages = (L_ + page - 1) / page;
    std::vector<std::int32_t> qo_indptr{0}, kv_indptr{0}, kv_len, indices;
    for (int b = 0; b < B_; ++b) {
      for (int i = 0; i < pages; ++i)
        indices.push_back(paged_ ? pool_.host[static_cast<std::size_t>(b) * pool_.pages_per_seq + i] : b);
      qo_indptr.push_back(b + 1);
      kv_indptr.push_back(static_cast<std::int32_t>(indices.size()));
      kv_len.push_back(L_);
    }
    indices_ = DeviceBuffer(indices.size() * sizeof(std::int32_t));
    upload(indices_.get(), indices.data(), indices_.bytes(), ctx.stream);
    float_ws_ = DeviceBuffer(kFloatWorkspaceBytes);
    int_ws_ = DeviceBuffer(kIntWorkspaceBytes);
    check(flashinfer::MLAPlan<std::int32_t>(float_ws_.get(), kFloatWorkspaceBytes, int_ws_.get(), int_host_.get(),
                                               kIntWorkspaceBytes, info_, qo_indptr.data(), kv_indptr.data(),
                                               kv_len.data(), static_cast<std::uint32_t>(B_),
                                               static_cast<std::uint32_t>(H_), kLatentRank, /*causal=*/false,
                                               ctx.stream),
             "MLAPlan");
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    const float sm_scale = latent_attention_scale(r);
    auto build = [&](auto tag) {
      using T = decltype(tag);
      flashinfer::MLAParams<T, T, T, std::int32_t> p{};
      T* q = static_cast<T*>(q_.get());
      T* cache = static_cast<T*>(cache_.get());
      p.q_nope = q;  // q [B, H, 576]: the first 512 of a row, then the rope part
      p.q_pe = q + kLatentRank;
      p.ckv = cache;  // the cache's rows likewise
      p.kpe = cache + kLatentRank;
      void* iw = int_ws_.get();
      p.q_indptr = at<std::int32_t>(iw, info_.q_indptr_offset);
      p.kv_indptr = at<std::int32_t>(iw, info_.kv_indptr_offset);
      p.partial_indptr = at<std::int32_t>(iw, info_.partial_indptr_offset);
      p.kv_indices = indices_.as<std::int32_t>();
      p.q_len = at<std::int32_t>(iw, info_.q_len_offset);
      p.kv_len = at<std::int32_t>(iw, info_.kv_len_offset);
      p.q_start = at<std::int32_t>(iw, info_.q_start_offset);
      p.kv_start = at<std::int32_t>(iw, info_.kv_start_offset);
      p.kv_end = at<std::int32_t>(iw, info_.kv_end_offset);
      p.work_indptr = at<std::int32_t>(iw, info_.work_indptr_offset);
      p.merge_packed_offset_start = at<std::int32_t>(iw, info_.merge_packed_offset_start_offset);
      p.merge_packed_offset_end = at<std::int32_t>(iw, info_.merge_packed_offset_end_offset);
      p.merge_partial_packed_offset_start = at<std::int32_t>(iw, info_.merge_partial_packed_offset_start_offset);
      p.merge_partial_packed_offset_end = at<std::int32_t>(iw, info_.merge_partial_packed_offset_end_offset);
      p.merge_partial_stride = at<std::int32_t>(iw, info_.merge_partial_stride_offset);
      p.final_o = static_cast<T*>(out_.get());
      p.final_lse = nullptr;
      p.partial_o = at<T>(float_ws_.get(), info_.partial_o_offset);
      p.partial_lse = at<float>(float_ws_.get(), info_.partial_lse_offset);
      p.num_heads = flashinfer::uint_fastdiv(static_cast<std::uint32_t>(H_));
      p.block_size = flashinfer::uint_fastdiv(static_cast<std::uint32_t>(page));
      p.q_nope_stride_n = p.q_pe_stride_n = static_cast<std::uint32_t>(H_ * kW);
      p.q_nope_stride_h = p.q_pe_stride_h = kW;
      p.ckv_stride_page = p.kpe_stride_page = static_cast<std::uint32_t>(page * kW);
      p.ckv_stride_n = p.kpe_stride_n = kW;
      p.o_stride_n = static_cast<std::uint32_t>(H_ * kLatentRank);  // out [B, H, 512]
      p.o_stride_h = kLatentRank;
      p.sm_scale = sm_scale;
      p.return_lse_base_on_e = false;
      const auto bx = static_cast<std::uint32_t>(info_.num_blks_x), by = static_cast<std::uint32_t>(info_.num_blks_y);
      run_ = [this, p, bx, by]() {
        check(flashinfer::mla::BatchMLAPagedAttention<flashinfer::MaskMode::kNone, kLatentRank, kLatentRopeDim>(
                     p, bx, by, ctx_.stream),
                 "BatchMLAPagedAttention");
      };
    };
    if (r.dtype == DType::bf16)
      build(__nv_bfloat16{});
    else
      build(__half{});
  }
  FlashInferMlaOp(const FlashInferMlaOp&) = delete;
  FlashInferMlaOp& operator=(const FlashInferMlaOp&) = delete;

  void run() override { run_(); }
  int splits() const override { return 1; }
  // The entry point and what its plan chose, for the point's impl_detail.
  std::map<std::string, std::string> notes() const override {
    return {{"library", "flashinfer"},
            {"flashinfer_version", PHASEBENCH_FLASHINFER_VERSION},
            {"entry_point", "mla::BatchMLAPagedAttention (MLAPlan)"},
            {"grid", std::to_string(info_.num_blks_x) + " x " + std::to_string(info_.num_blks_y)}};
  }

 protected:
  std::string shape() const override { return "FlashInfer " + LatentAttentionOp::shape(); }

 private:
  DeviceBuffer indices_, float_ws_, int_ws_;
  PinnedBuffer int_host_{kIntWorkspaceBytes};  // its plan stages here
  flashinfer::MLAPlanInfo info_;
  std::function<void()> run_;
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(latent_attention_flashinfer) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  library_versions()["flashinfer"] = PHASEBENCH_FLASHINFER_VERSION;
  auto plan = [](const OpRequest& r, const Context& ctx) -> std::shared_ptr<const OpPlan> {
    return plan_flashinfer_mla(r, ctx);
  };
  for (const char* kind : {kLatentAttention, kLatentAttentionPaged})
    registry.add({kind, Impl::flashinfer, takes_16bit, {}, plan, prepare_op<FlashInferMlaOp, FlashInferMlaPlan>()});
}
