// Decode attention: one query token per sequence over L cached tokens (DESIGN:
// 4*B*Hq*L*D FLOPs; c*2*B*Hkv*L*D KV bytes (+ 8*Hkv of scales for an fp8
// cache), a*B*Hq*D query and output bytes),
// over a contiguous cache [B, Hkv, L, D] or a paged one (pages [P, Hkv, page, D]
// plus an int32 block table per sequence). One sweep group: batch x context,
// contiguous and paged, for the attention models.
#include "phasebench/checked.hpp"
#include "phasebench/ops/attention.hpp"

namespace phasebench {

OpRequest decode_attention_request(const AttentionShape& s, DType dtype, bool paged, std::uint64_t page_size,
                                   std::uint64_t splits, std::uint64_t seed, bool kv_fp8) {
  OpRequest r;
  r.kind = paged ? kDecodeAttentionPaged : kDecodeAttention;
  r.phase = Phase::decode;
  r.dtype = dtype;
  r.impl = Impl::own;
  r.shape = s.shape();
  if (paged) r.params.set("page_size", page_size);
  r.params.set("splits", splits);
  if (kv_fp8) r.params.set("kv_fp8", 1);
  r.seed = seed;
  return r;
}

DType decode_attention_kv_dtype(const OpRequest& r) { return r.params.get("kv_fp8", 0) ? DType::fp8 : r.dtype; }

namespace {

OpCost contiguous_cost(const OpRequest& r) {
  return decode_attention_cost(AttentionShape::of(r.shape), element_bytes(decode_attention_kv_dtype(r)),
                               element_bytes(r.dtype));
}

OpCost paged_cost(const OpRequest& r) {
  return decode_attention_paged_cost(AttentionShape::of(r.shape), element_bytes(decode_attention_kv_dtype(r)),
                                     element_bytes(r.dtype), r.params["page_size"]);
}

// The page pools hold whole pages: the last page of each sequence is allocated in full.
std::uint64_t paged_footprint(const OpRequest& r) {
  const auto s = AttentionShape::of(r.shape);
  const auto P = r.params["page_size"], c = element_bytes(decode_attention_kv_dtype(r));
  const auto pages = mul(s.B, pages_per_sequence(s.L, P), "pages");
  const auto cost = paged_cost(r);
  return add(add(mul({c, 2, pages, s.Hkv, P, s.D}, "paged KV bytes"), kv_scale_bytes(s.Hkv, c)),
             add(cost.bytes.activations + cost.bytes.writes, mul(4, pages)));
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(decode_attention) {
  using namespace phasebench;
  registry.declare(OpDecl{kDecodeAttention, {"B", "Hq", "Hkv", "L", "D"}, {"splits", "kv_fp8"}, contiguous_cost,
                          [](const OpRequest& r) { return contiguous_cost(r).bytes.total(); }, {}});
  registry.declare(OpDecl{kDecodeAttentionPaged, {"B", "Hq", "Hkv", "L", "D"}, {"page_size", "splits", "kv_fp8"},
                          paged_cost, paged_footprint, {}});
  // Each shape with the cache in the run's dtype, then in fp8 e4m3 (kv_bits:8 in
  // the name), where the backend takes it: the bytes halve, the roofline shows it.
  registry.group(SweepGroup{
      "decode_attention",
      "decode attention over --attention-batches x --contexts, contiguous and paged (--page-size), with the cache in the "
      "run's dtype and in fp8",
      30,
      SweepGroup::Models::attention, [](const SweepScope& sc) {
        const ModelConfig& m = *sc.model;
        const auto P = sc.axes->one("page_size");
        std::vector<Point> pts;
        for (const bool paged : {false, true}) {
          if (sc.impls(decode_attention_request({1, m.heads, m.kv_heads, 1, m.head_dim}, sc.dtype, paged, P), false)
                  .empty())
            continue;  // the backend has no such kernel for this dtype
          for (const bool fp8 : {false, true})
            for (auto B : (*sc.axes)["attention_batches"])
              for (auto L : (*sc.axes)["contexts"]) {
                auto r = decode_attention_request({B, m.heads, m.kv_heads, L, m.head_dim}, sc.dtype, paged, P, 0, 0x5eed, fp8);
                if (fp8 && sc.impls(r, false).empty()) continue;  // no fp8-cache kernel for this dtype here
                std::vector<PointArg> args{{"batch", B, "batch"}, {"context", L, "context"}};
                if (paged) args.push_back({"page_size", P, "page"});
                if (fp8) args.push_back({"kv_bits", 8, "kv_bits"});
                pts.push_back(make_point("decode", paged ? "attention_paged" : "attention", m.name, "", m.name, r, args,
                                         false));
              }
        }
        return pts;
      }});
}
