// Decode attention: one query token per sequence over L cached tokens (DESIGN:
// 4*B*Hq*L*D FLOPs; c*2*B*Hkv*L*D KV bytes, a*B*Hq*D query and output bytes),
// over a contiguous cache [B, Hkv, L, D] or a paged one (pages [P, Hkv, page, D]
// plus an int32 block table per sequence). One sweep group: batch x context,
// contiguous and paged, for the attention models.
#include "phasebench/checked.hpp"
#include "phasebench/ops/attention.hpp"

namespace phasebench {

OpRequest decode_attention_request(const AttentionShape& s, DType dtype, bool paged, std::uint64_t page_size,
                                   std::uint64_t splits, std::uint64_t seed) {
  OpRequest r;
  r.kind = paged ? kDecodeAttentionPaged : kDecodeAttention;
  r.phase = Phase::decode;
  r.dtype = dtype;
  r.impl = Impl::own;
  r.shape = s.shape();
  if (paged) r.params.set("page_size", page_size);
  r.params.set("splits", splits);
  r.seed = seed;
  return r;
}

namespace {

OpCost contiguous_cost(const OpRequest& r) {
  const auto e = element_bytes(r.dtype);
  return decode_attention_cost(AttentionShape::of(r.shape), e, e);
}

OpCost paged_cost(const OpRequest& r) {
  const auto e = element_bytes(r.dtype);
  return decode_attention_paged_cost(AttentionShape::of(r.shape), e, e, r.params["page_size"]);
}

// The page pools hold whole pages: the last page of each sequence is allocated in full.
std::uint64_t paged_footprint(const OpRequest& r) {
  const auto s = AttentionShape::of(r.shape);
  const auto P = r.params["page_size"], e = element_bytes(r.dtype);
  const auto pages = mul(s.B, pages_per_sequence(s.L, P), "pages");
  const auto c = paged_cost(r);
  return add(mul({e, 2, pages, s.Hkv, P, s.D}, "paged KV bytes"), add(c.bytes.activations + c.bytes.writes, mul(4, pages)));
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(decode_attention) {
  using namespace phasebench;
  registry.declare(OpDecl{kDecodeAttention, {"B", "Hq", "Hkv", "L", "D"}, {"splits"}, contiguous_cost,
                          [](const OpRequest& r) { return contiguous_cost(r).bytes.total(); }, {}});
  registry.declare(
      OpDecl{kDecodeAttentionPaged, {"B", "Hq", "Hkv", "L", "D"}, {"page_size", "splits"}, paged_cost, paged_footprint, {}});
  registry.group(SweepGroup{
      "decode_attention",
      "decode attention over --attention-batches x --contexts, contiguous and paged (--page-size)", 30,
      SweepGroup::Models::attention, [](const SweepScope& sc) {
        const ModelConfig& m = *sc.model;
        const auto P = sc.axes->one("page_size");
        std::vector<Point> pts;
        for (const bool paged : {false, true}) {
          if (sc.impls(decode_attention_request({1, m.heads, m.kv_heads, 1, m.head_dim}, sc.dtype, paged, P), false)
                  .empty())
            continue;  // the backend has no such kernel for this dtype
          for (auto B : (*sc.axes)["attention_batches"])
            for (auto L : (*sc.axes)["contexts"]) {
              auto r = decode_attention_request({B, m.heads, m.kv_heads, L, m.head_dim}, sc.dtype, paged, P);
              std::vector<PointArg> args{{"batch", B, "batch"}, {"context", L, "context"}};
              if (paged) args.push_back({"page_size", P, "page"});
              pts.push_back(make_point("decode", paged ? "attention_paged" : "attention", m.name, "", m.name, r, args,
                                       false));
            }
        }
        return pts;
      }});
}
