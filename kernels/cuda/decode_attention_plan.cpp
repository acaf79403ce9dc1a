// Decode attention's host plan (decode_attention_plan.hpp): the kernels'
// limits, rows per CTA, the split-KV heuristic, and a request's plan.
#include "cuda/decode_attention_plan.hpp"

#include <algorithm>
#include <climits>

#include "phasebench/ops/decode_attention.hpp"

namespace phasebench::cuda {

std::optional<std::string> decode_attention_unsupported(DType dtype, long long Hq, long long Hkv, long long D, bool paged,
                                                        long long page_size, long long S) {
  if (dtype != DType::bf16 && dtype != DType::fp16)
    return "decode attention: dtype " + std::string(to_string(dtype)) + " is not supported on CUDA; use bf16 or fp16";
  if (D != 64 && D != 128 && D != 256)
    return "decode attention: head_dim " + std::to_string(D) + " is not supported; use 64, 128 or 256";
  if (Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0)
    return "decode attention: query heads (" + std::to_string(Hq) + ") must be a positive multiple of kv heads (" +
           std::to_string(Hkv) + ")";
  if (S < 1 || S > 16)
    return "decode attention: " + std::to_string(S) + " new tokens per sequence; use 1 to 16";
  if (Hkv * decode_head_chunks(static_cast<int>(std::min<long long>(S * (Hq / Hkv), 1 << 20))) > 65535)
    return "decode attention: too many kv heads x head chunks for one grid dimension (at most 65535)";
  if (paged && (page_size < 16 || page_size % 16 != 0))
    return "decode attention: page size " + std::to_string(page_size) + " is not supported; use a multiple of 16";
  return std::nullopt;
}

int decode_heads_per_cta(int G) {
  const int chunks = decode_head_chunks(G);
  const int per = (G + chunks - 1) / chunks;
  int gt = 1;
  while (gt < per) gt <<= 1;
  return gt;  // <= 8 by construction of decode_head_chunks
}

int decode_head_chunks(int G) { return G <= 8 ? 1 : (G + 7) / 8; }

int choose_decode_splits(int B, int Hkv, int head_chunks, int L, int align, int sm_count, int ctas_per_sm) {
  const long long base = static_cast<long long>(B) * Hkv * std::max(head_chunks, 1);
  const long long slots = static_cast<long long>(std::max(sm_count, 1)) * std::max(ctas_per_sm, 1);  // one wave
  if (base <= 0 || base >= slots) return 1;  // a full wave without splitting
  const long long min_chunk = std::max(kMinDecodeChunk, align);
  const long long most = std::min({2 * slots / base, std::max<long long>(1, L / min_chunk),
                                   static_cast<long long>(kMaxDecodeSplits)});
  // The split count whose grid finishes first: waves of CTAs times the tokens
  // each CTA walks, plus what a split costs beyond its tokens (its prologue,
  // partial write and share of the reduce, about kSplitCostTokens tokens), so a
  // grid that spills a few CTAs into another wave is not chosen over one that
  // sits just under a whole number of waves.
  int best = 1;
  long long best_cost = L;  // one wave of `base` CTAs, each walking the whole context
  for (long long s = 2; s <= most; ++s) {
    const int chunk = split_kv_chunk(L, s, align);
    const long long splits = (L + chunk - 1) / chunk;
    const long long waves = (base * splits + slots - 1) / slots;
    const long long cost = waves * (chunk + kSplitCostTokens);
    if (cost < best_cost) {
      best_cost = cost;
      best = static_cast<int>(splits);
    }
  }
  return best;
}

SplitKvPlan plan_decode_splits(DType dtype, int B, int Hq, int Hkv, int L, int D, int page_size,
                               std::uint64_t requested, int sm_count, bool kv_fp8, int S) {
  const bool paged = page_size > 0;
  const int G = S * (Hq / Hkv), align = paged ? page_size : 64;  // G: query rows per KV head
  const long long splits =
      requested == 0 ? choose_decode_splits(B, Hkv, decode_head_chunks(G), L, align, sm_count,
                                            decode_attention_ctas_per_sm(dtype, D, G, paged, kv_fp8))
                     : requested_splits(requested, L, kMaxDecodeSplits);
  // A partial of D values and the log2-sum-exp2 per query row (B*S tokens x Hq heads).
  return plan_split_kv(L, splits, align, static_cast<std::size_t>(B) * S * Hq, static_cast<std::size_t>(D) + 1);
}

namespace {

std::optional<std::string> request_unsupported(const OpRequest& r, const Context& ctx) {
  const auto a = AttentionShape::of(r.shape);
  const bool paged = r.kind == kDecodeAttentionPaged;
  const auto& o = r.options.as<DecodeAttentionOptions>();
  const std::uint64_t P = paged ? o.page_size : 0;
  const auto S = decode_attention_new_tokens(r);
  if (auto why = decode_attention_unsupported(r.dtype, static_cast<long long>(a.Hq), static_cast<long long>(a.Hkv),
                                              static_cast<long long>(a.D), paged, static_cast<long long>(P),
                                              static_cast<long long>(std::min<std::uint64_t>(S, 1 << 20))))
    return why;
  if (a.L == 0) return std::string("decode attention: batch and context must be >= 1");
  if (auto why = split_kv_request_unsupported("decode attention", a.B, decode_attention_max_length(r),
                                              o.splits, kMaxDecodeSplits, P))
    return why;
  const int rows = static_cast<int>(std::min<std::uint64_t>(S * (a.Hq / a.Hkv), 1 << 20));
  if (auto why = shared_memory_unsupported(
          "decode attention (head_dim " + std::to_string(a.D) + ", 8 query rows per CTA on tensor cores)",
          decode_attention_smem_bytes(static_cast<int>(a.D), rows, decode_attention_kv_dtype(r) == DType::fp8), ctx))
    return why;
  return std::nullopt;
}

}  // namespace

std::shared_ptr<const DecodeAttentionPlan> plan_decode_attention(const OpRequest& r, const Context& ctx) {
  return make_plan<DecodeAttentionPlan>(request_unsupported(r, ctx), [&](DecodeAttentionPlan& plan) {
    const auto a = AttentionShape::of(r.shape);
    plan.paged = r.kind == kDecodeAttentionPaged;
    plan.kv_dtype = decode_attention_kv_dtype(r);
    const auto& o = r.options.as<DecodeAttentionOptions>();
    // Every dimension fits in int: the check's 32-bit indexing and the limits above.
    const int B = static_cast<int>(a.B), Hq = static_cast<int>(a.Hq), Hkv = static_cast<int>(a.Hkv),
              L = static_cast<int>(decode_attention_max_length(r)), D = static_cast<int>(a.D),
              S = static_cast<int>(decode_attention_new_tokens(r));
    const int page_size = plan.paged ? static_cast<int>(o.page_size) : 0;
    plan.split = plan_decode_splits(r.dtype, B, Hq, Hkv, L, D, page_size, o.splits, ctx.sm_count,
                                    plan.kv_dtype == DType::fp8, S);
    if (o.context_dist.ragged())
      for (auto l : decode_attention_lengths(r)) plan.lengths.push_back(static_cast<int>(l));
    DecodeAttentionParams& p = plan.params;
    p = decode_attention_params(r.dtype, nullptr, nullptr, nullptr, nullptr, B, Hq, Hkv, L, D, plan.split.splits,
                                nullptr);
    p.S = S;
    p.page_size = page_size;
    p.pages_per_seq =
        plan.paged ? static_cast<int>(pages_per_sequence(static_cast<std::uint64_t>(L), o.page_size)) : 0;
    p.kv_fp8 = plan.kv_dtype == DType::fp8;
    plan.scratch_bytes = plan.split.workspace_floats * sizeof(float);
  });
}

}  // namespace phasebench::cuda
