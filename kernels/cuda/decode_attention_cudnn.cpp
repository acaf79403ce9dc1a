// Decode attention's cuDNN row (Impl::cudnn), both kinds through cuDNN's SDPA
// forward with one query token per sequence: over the paged cache (paged K/V:
// our page pools read in place as cuDNN's containers, our block table as its page
// tables, the padding mask's per-sequence lengths) and over the contiguous cache
// [B, Hkv, L, D] (plain SDPA; the padding mask only for ragged contexts). The graph
// is built once per point in the request's plan; the buffers, block table and check
// are our op's (DecodeAttentionOp), so every row reads the same bytes.
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/attention_cudnn.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/decode_attention.hpp"
#include "cuda/decode_attention_op.hpp"
#include "cuda/decode_attention_plan.hpp"
#include "phasebench/ops/decode_attention.hpp"

namespace phasebench::cuda {

namespace {

namespace fe = cudnn_frontend;

// The graph's tensors, by uid (the variant pack's keys).
enum Uid : std::int64_t { kQ = 1, kK = 2, kV = 3, kO = 4, kSeqQ = 5, kSeqKv = 6, kTableK = 7, kTableV = 8 };

// A request's plan: ours as DecodeAttentionOp takes it (the params, every pointer
// null; no split-KV workspace; the ragged contexts), each sequence's context as the
// padding mask reads it (int32 [B]: drawn when ragged, else all L), and the graph
// built for its shape and device.
struct DecodeCudnnPlan : DecodeAttentionPlan {
  bool ragged = false;
  std::vector<std::int32_t> seq_len_kv;
  CudnnSdpaGraph sdpa;
};

std::optional<std::string> request_unsupported(const OpRequest& r, const Context& ctx) {
  if (auto why = cudnn_sdpa_dtype_refusal(r.dtype)) return why;
  if (auto why = cudnn_sdpa_device_refusal(ctx.cc_major, ctx.cc_minor)) return why;
  const auto& o = r.options.as<DecodeAttentionOptions>();
  if (auto why = cudnn_decode_refusal(o.kv_fp8, decode_attention_new_tokens(r), o.splits)) return why;
  const auto a = AttentionShape::of(r.shape);
  if (a.B == 0 || a.L == 0 || a.D == 0) return std::string("decode attention: batch, context and head_dim must be >= 1");
  if (a.Hq == 0 || a.Hkv == 0 || a.Hq % a.Hkv != 0)
    return "decode attention: query heads (" + std::to_string(a.Hq) + ") must be a positive multiple of kv heads (" +
           std::to_string(a.Hkv) + ")";
  if (r.kind == kDecodeAttentionPaged && o.page_size == 0) return std::string("decode attention: page size must be >= 1");
  return std::nullopt;
}

std::shared_ptr<const DecodeCudnnPlan> plan_decode_attention_cudnn(const OpRequest& r, const Context& ctx) {
  return make_plan<DecodeCudnnPlan>(request_unsupported(r, ctx), [&](DecodeCudnnPlan& plan) {
    const auto a = AttentionShape::of(r.shape);
    const auto& o = r.options.as<DecodeAttentionOptions>();
    plan.paged = r.kind == kDecodeAttentionPaged;
    plan.ragged = o.context_dist.ragged();
    // Every dimension fits in int: the check's 32-bit indexing.
    const auto B = static_cast<std::int64_t>(a.B), Hq = static_cast<std::int64_t>(a.Hq),
               Hkv = static_cast<std::int64_t>(a.Hkv), D = static_cast<std::int64_t>(a.D),
               L = static_cast<std::int64_t>(decode_attention_max_length(r));
    for (const auto l : decode_attention_lengths(r)) plan.seq_len_kv.push_back(static_cast<std::int32_t>(l));
    const std::int64_t P = plan.paged ? static_cast<std::int64_t>(o.page_size) : 0;
    const std::int64_t pages_per_seq =
        plan.paged ? static_cast<std::int64_t>(pages_per_sequence(static_cast<std::uint64_t>(L), o.page_size)) : 0;

    auto g = new_cudnn_sdpa_graph(r.dtype);
    auto Q = cudnn_tensor(*g, "Q", kQ, cudnn_bshd(B, 1, Hq, D));
    // The paged cache's pools hold B * pages_per_seq pages (BlockTable), each [Hkv, P, D].
    const auto kv = plan.paged ? cudnn_page_pool(B * pages_per_seq, Hkv, P, D) : cudnn_bhsd(B, Hkv, L, D);
    auto K = cudnn_tensor(*g, plan.paged ? "container_K" : "K", kK, kv);
    auto V = cudnn_tensor(*g, plan.paged ? "container_V" : "V", kV, kv);
    auto attrs = fe::graph::SDPA_attributes()
                     .set_name(plan.paged ? "decode_attention_paged" : "decode_attention")
                     .set_generate_stats(false)
                     .set_attn_scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))));
    // One query token sees its whole context: no causal mask. Per-sequence contexts
    // through the padding mask, which paged K/V always need.
    if (plan.paged || plan.ragged) {
      auto seq_q = cudnn_tensor(*g, "seq_len_q", kSeqQ, cudnn_seq_lens(B), true);
      auto seq_kv = cudnn_tensor(*g, "seq_len_kv", kSeqKv, cudnn_seq_lens(B), true);
      attrs.set_padding_mask(true).set_seq_len_q(seq_q).set_seq_len_kv(seq_kv);
    }
    if (plan.paged) {
      // K and V share the one block table, read in place (same bytes as [B, pages_per_seq]).
      attrs.set_paged_attention_k_table(
          cudnn_tensor(*g, "page_table_k", kTableK, cudnn_block_table(B, pages_per_seq), true));
      attrs.set_paged_attention_v_table(
          cudnn_tensor(*g, "page_table_v", kTableV, cudnn_block_table(B, pages_per_seq), true));
      attrs.set_paged_attention_max_seq_len_kv(static_cast<int>(L));
    }
    auto outputs = g->sdpa(Q, K, V, attrs);
    cudnn_output(*outputs[0], kO, cudnn_bshd(B, 1, Hq, D));
    std::ostringstream what;
    what << (plan.paged ? "paged decode attention " : "decode attention ") << to_string(r.dtype) << " B=" << B
         << " Hq=" << Hq << " Hkv=" << Hkv << " L=" << L << " D=" << D;
    if (plan.paged) what << " page_size=" << P;
    if (plan.ragged) what << " ragged contexts";
    if (auto why = build_cudnn_sdpa(g, ctx, what.str(), plan.sdpa)) {
      plan.unsupported = why;
      return;
    }
    plan.scratch_bytes = plan.sdpa.workspace_bytes;
    plan.kv_dtype = r.dtype;
    plan.split = SplitKvPlan{};  // one pass, no workspace of ours: cuDNN splits as its engine decides
    if (plan.ragged) plan.lengths.assign(plan.seq_len_kv.begin(), plan.seq_len_kv.end());
    DecodeAttentionParams& p = plan.params;
    p = decode_attention_params(r.dtype, nullptr, nullptr, nullptr, nullptr, static_cast<int>(B), static_cast<int>(Hq),
                                static_cast<int>(Hkv), static_cast<int>(L), static_cast<int>(D), 1, nullptr);
    p.page_size = static_cast<int>(P);
    p.pages_per_seq = static_cast<int>(pages_per_seq);
  });
}

// The operation: our op's buffers, seeds, block table and check (DecodeAttentionOp),
// cuDNN's execution of the graph in place of our kernels.
class DecodeAttentionCudnnOp final : public DecodeAttentionOp {
 public:
  DecodeAttentionCudnnOp(Context& ctx, const OpRequest& r, const DecodeCudnnPlan& plan)
      : DecodeAttentionOp(ctx, r, plan), sdpa_(plan.sdpa), cudnn_ws_(plan.sdpa.workspace_bytes) {
    pack_ = {{kQ, q_.get()}, {kK, k_.get()}, {kV, v_.get()}, {kO, out_.get()}};
    if (paged_ || plan.ragged) {
      // The padding mask's lengths, uploaded here, outside any timed region.
      const std::vector<std::int32_t> ones(plan.seq_len_kv.size(), 1);
      seq_q_ = DeviceBuffer(ones.size() * sizeof(std::int32_t));
      seq_kv_ = DeviceBuffer(plan.seq_len_kv.size() * sizeof(std::int32_t));
      upload(seq_q_.get(), ones.data(), seq_q_.bytes(), ctx.stream);
      upload(seq_kv_.get(), plan.seq_len_kv.data(), seq_kv_.bytes(), ctx.stream);
      PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // `ones` goes out of scope
      pack_[kSeqQ] = seq_q_.get();
      pack_[kSeqKv] = seq_kv_.get();
    }
    if (paged_) {
      // Our block table [B, pages_per_seq] is both page tables, read in place; the
      // variant pack holds void*, and cuDNN only reads it.
      void* table = const_cast<std::int32_t*>(pool_.table());
      pack_[kTableK] = table;
      pack_[kTableV] = table;
    }
  }

  void run() override { run_cudnn_sdpa(sdpa_, pack_, cudnn_ws_.get(), ctx_); }

  std::map<std::string, std::string> notes() const override { return cudnn_sdpa_notes(sdpa_); }

 protected:
  std::string shape() const override {
    std::ostringstream os;
    os << (paged_ ? "decode attention (paged, cuDNN " : "decode attention (cuDNN ") << sdpa_.engine << ") "
       << to_string(r_.dtype) << " B=" << p_.B << " Hq=" << p_.Hq << " Hkv=" << p_.Hkv << " L=" << p_.L
       << " D=" << p_.D;
    if (!lengths_.empty())
      os << " contexts " << r_.options.as<DecodeAttentionOptions>().context_dist.text() << " (longest " << p_.L << ")";
    if (paged_) os << " page_size=" << pool_.page_size;
    return os.str();
  }

 private:
  CudnnSdpaGraph sdpa_;  // shared with the plan and the point's other copies; each op its own workspace
  DeviceBuffer cudnn_ws_, seq_q_, seq_kv_;
  std::unordered_map<std::int64_t, void*> pack_;  // device pointers by uid
};

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(decode_attention_cudnn) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  register_cudnn_versions();
  for (const char* kind : {kDecodeAttention, kDecodeAttentionPaged})
    registry.add({kind, Impl::cudnn, takes_16bit, {},
                  [](const OpRequest& r, const Context& ctx) -> std::shared_ptr<const OpPlan> {
                    return plan_decode_attention_cudnn(r, ctx);
                  },
                  prepare_op<DecodeAttentionCudnnOp, DecodeCudnnPlan>()});
}
