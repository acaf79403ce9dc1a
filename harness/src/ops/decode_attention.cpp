// Decode attention: one query token per sequence over L cached tokens (DESIGN:
// 4*B*Hq*L*D FLOPs; c*2*B*Hkv*L*D KV bytes (+ 8*Hkv of scales for an fp8
// cache), a*B*Hq*D query and output bytes),
// over a contiguous cache [B, Hkv, L, D] or a paged one (pages [P, Hkv, page, D]
// plus an int32 block table per sequence). Two sweep groups: batch x context,
// contiguous and paged, ours beside the attention libraries' rows, for the
// grouped-query attention models; and multi-token and ragged decode steps (ours).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/decode_attention.hpp"
#include "phasebench/ops/shared_axes.hpp"
#include "phasebench/step_time.hpp"

namespace phasebench {

OpRequest decode_attention_request(const AttentionShape& s, DType dtype, bool paged, std::uint64_t page_size,
                                   std::uint64_t splits, std::uint64_t seed, bool kv_fp8) {
  OpRequest r;
  r.kind = paged ? kDecodeAttentionPaged : kDecodeAttention;
  r.phase = Phase::decode;
  r.dtype = dtype;
  r.impl = Impl::own;
  r.shape = s.shape();
  auto& p = r.options.edit<DecodeAttentionOptions>();
  p.page_size = paged ? page_size : 0;
  p.splits = splits;
  p.kv_fp8 = kv_fp8;
  r.seed = seed;
  return r;
}


DType decode_attention_kv_dtype(const OpRequest& r) { return r.options.as<DecodeAttentionOptions>().kv_fp8 ? DType::fp8 : r.dtype; }

void set_decode_steps(OpRequest& r, std::uint64_t S, const ContextDist& dist) {
  if (S == 0) throw InputError("--new-tokens: a decode step has at least 1 new token per sequence");
  auto& p = r.options.edit<DecodeAttentionOptions>();
  p.new_tokens = S;
  p.context_dist = dist;
  decode_attention_lengths(r);  // InputError when the contexts cannot hold S tokens
}

std::uint64_t decode_attention_new_tokens(const OpRequest& r) {
  return std::max<std::uint64_t>(1, r.options.as<DecodeAttentionOptions>().new_tokens);
}

std::vector<std::uint64_t> decode_attention_lengths(const OpRequest& r) {
  const auto s = AttentionShape::of(r.shape);
  return draw_context_lengths(s.B, s.L, r.options.as<DecodeAttentionOptions>().context_dist, r.seed, decode_attention_new_tokens(r));
}

std::uint64_t decode_attention_max_length(const OpRequest& r) {
  if (!r.options.as<DecodeAttentionOptions>().context_dist.ragged()) return AttentionShape::of(r.shape).L;
  const auto l = decode_attention_lengths(r);
  return l.empty() ? 0 : *std::max_element(l.begin(), l.end());
}

DecodeQueries decode_attention_queries(const OpRequest& r) {
  DecodeQueries q;
  q.S = decode_attention_new_tokens(r);
  if (r.options.as<DecodeAttentionOptions>().context_dist.ragged()) q.lengths = decode_attention_lengths(r);
  return q;
}

namespace {

OpCost contiguous_cost(const OpRequest& r) {
  return decode_attention_cost(AttentionShape::of(r.shape), element_bytes(decode_attention_kv_dtype(r)),
                               element_bytes(r.dtype), decode_attention_queries(r));
}

OpCost paged_cost(const OpRequest& r) {
  return decode_attention_paged_cost(AttentionShape::of(r.shape), element_bytes(decode_attention_kv_dtype(r)),
                                     element_bytes(r.dtype), r.options.as<DecodeAttentionOptions>().page_size, decode_attention_queries(r));
}

// A ragged contiguous cache is allocated at the longest context for every sequence.
std::uint64_t contiguous_footprint(const OpRequest& r) {
  const auto s = AttentionShape::of(r.shape);
  const auto c = element_bytes(decode_attention_kv_dtype(r));
  const auto cost = contiguous_cost(r);
  return add(add(mul({c, 2, s.B, s.Hkv, decode_attention_max_length(r), s.D}, "KV bytes"), kv_scale_bytes(s.Hkv, c)),
             cost.bytes.activations + cost.bytes.writes);
}

// The page pools hold whole pages: the last page of each sequence is allocated
// in full, and every sequence as many pages as the longest.
std::uint64_t paged_footprint(const OpRequest& r) {
  const auto s = AttentionShape::of(r.shape);
  const auto P = r.options.as<DecodeAttentionOptions>().page_size, c = element_bytes(decode_attention_kv_dtype(r));
  const auto pages = mul(s.B, pages_per_sequence(decode_attention_max_length(r), P), "pages");
  const auto cost = paged_cost(r);
  return add(add(mul({c, 2, pages, s.Hkv, P, s.D}, "paged KV bytes"), kv_scale_bytes(s.Hkv, c)),
             add(cost.bytes.activations + cost.bytes.writes, mul(4, pages)));
}

// The shape's dimensions, then S when more than one new token, and the drawn
// contexts (shortest, mean, longest) when ragged.
nlohmann::json shape_json(const OpRequest& r) {
  const auto s = AttentionShape::of(r.shape);
  nlohmann::json j{{"B", s.B}, {"Hq", s.Hq}, {"Hkv", s.Hkv}, {"L", s.L}, {"D", s.D}};
  if (const auto S = decode_attention_new_tokens(r); S > 1) j["S"] = S;
  if (const auto& d = r.options.as<DecodeAttentionOptions>().context_dist; d.ragged()) {
    const auto l = decode_attention_lengths(r);
    double sum = 0;
    for (auto x : l) sum += static_cast<double>(x);
    j["context_dist"] = d.text();
    j["L_min"] = *std::min_element(l.begin(), l.end());
    j["L_mean"] = sum / static_cast<double>(l.size());
    j["L_max"] = *std::max_element(l.begin(), l.end());
  }
  return j;
}

}  // namespace

namespace {

// Serving (step_time.hpp): one decode token per sequence over a cache of one
// context for all (ragged batches and multi-token steps left out), on the curve of
// its heads, head_dim and cache type, along batch and context; contiguous and
// paged points on the same curve (the faster of the two where both ran).
std::string decode_curve(std::uint64_t Hq, std::uint64_t Hkv, std::uint64_t D, const std::string& kv) {
  return "decode_attention/" + std::to_string(Hq) + "/" + std::to_string(Hkv) + "/" + std::to_string(D) + "/" + kv;
}

std::optional<StepMatch> decode_point(const nlohmann::json& p) {
  const auto B = point_size(p, "B"), Hq = point_size(p, "Hq"), Hkv = point_size(p, "Hkv"), L = point_size(p, "L"),
             D = point_size(p, "D");
  if (!B || !Hq || !Hkv || !L || !D || point_size(p, "S").value_or(1) != 1) return std::nullopt;
  if (p.contains("shape") && p["shape"].contains("context_dist")) return std::nullopt;
  const std::string kv = point_arg(p, "kv_bits", 0) == 8 ? "fp8" : point_dtype(p);
  return StepMatch{decode_curve(*Hq, *Hkv, *D, kv), {static_cast<double>(*B), static_cast<double>(*L)}};
}

std::optional<StepMatch> decode_step_op(const StepOpView& v) {
  const auto& s = v.op.shape;
  if (v.op.kind != "decode_attention" || !s.has("Hq") || s.get("S", 1) != 1) return std::nullopt;
  return StepMatch{decode_curve(s["Hq"], s["Hkv"], s["D"], std::string(to_string(v.kv_dtype))),
                   {static_cast<double>(s["B"]), static_cast<double>(s["L"])}};
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(decode_attention) {
  using namespace phasebench;
  // FlashInfer and cuDNN have rows of both kinds on CUDA (kernels/cuda/decode_attention_<library>.*).
  for (const bool paged : {false, true}) {
    OpDecl d{paged ? kDecodeAttentionPaged : kDecodeAttention,
             {"B", "Hq", "Hkv", "L", "D"},
             paged ? paged_cost : contiguous_cost,
             paged ? paged_footprint : contiguous_footprint,
             shape_json,
             {},
             {Impl::flashinfer, Impl::cudnn}};
    d.match_point = decode_point;
    d.match_step_op = decode_step_op;
    registry.declare(std::move(d));
  }
  // Each shape with the cache in the run's dtype, then in fp8 e4m3 (kv_bits:8 in
  // the name), where the backend takes it: the bytes halve, the roofline shows it.
  registry.group(SweepGroup{
      .name = "decode_attention",
      .help = "decode attention over batch x context, contiguous and paged (ours, FlashInfer and cuDNN), with the cache in the run's dtype and in "
              "fp8",
      .order = 30,
      .takes = grouped_query_attention,
      .takes_what = kGroupedQueryAttentionModels,
      .gpu_models = attention_gpu_models(),
      .axes = {attention_batch_axis("batch", "batch sizes"), context_axis("context", "context lengths"),
               page_size_axis()},
      .points = [](const SweepScope& sc) {
        const ModelConfig& m = *sc.model;
        const auto P = sc.axes->one("page_size");
        std::vector<Point> pts;
        for (const bool paged : {false, true}) {
          if (sc.impls(decode_attention_request({1, m.heads, m.kv_heads, 1, m.head_dim}, sc.dtype, paged, P), false)
                  .empty())
            continue;  // the backend has no such kernel for this dtype
          for (const bool fp8 : {false, true})
            for (auto B : (*sc.axes)["batch"])
              for (auto L : (*sc.axes)["context"]) {
                auto r = decode_attention_request({B, m.heads, m.kv_heads, L, m.head_dim}, sc.dtype, paged, P, 0, 0x5eed, fp8);
                std::vector<PointArg> args{{"batch", B, "batch"}, {"context", L, "context"}};
                if (paged) args.push_back({"page_size", P, "page"});
                if (fp8) args.push_back({"kv_bits", 8, "kv_bits"});
                // Ours, then the attention libraries' rows beside it (named impl:<library>;
                // our own keeps its name without). None for an fp8 cache nobody here takes.
                for (Impl impl : sc.impls(r, false)) {
                  r.impl = impl;
                  pts.push_back(make_point("decode", m.name, "", m.name, r, args, impl != Impl::own));
                }
              }
        }
        return pts;
      }});

  // Multi-token decode steps (speculative verification of S drafted tokens,
  // causal within them) and ragged batches (contexts drawn around L), each with
  // its baseline of one token over fixed contexts, contiguous and paged.
  registry.group(SweepGroup{
      .name = "decode_attention_multi",
      .help = "decode attention with new_tokens per sequence (causal within them) and over ragged contexts "
              "(context_dist), beside one token over fixed contexts, at batch x context",
      .order = 31,
      .takes = grouped_query_attention,
      .takes_what = kGroupedQueryAttentionModels,
      .gpu_models = attention_gpu_models(),
      .axes = {AxisDecl{.name = "batch",
                        .help = "batch sizes",
                        .gpu_default = {1, 32},
                        .cpu_default = {8},
                        .alias = "--multi-batches"},
               AxisDecl{.name = "context",
                        .help = "(mean) context lengths",
                        .gpu_default = {4096},
                        .cpu_default = {1024},
                        .alias = "--multi-contexts"},
               AxisDecl{.name = "new_tokens",
                        .help = "new tokens per sequence in a multi-token step (speculative verification), 1..16",
                        .gpu_default = {2, 4, 8},
                        .cpu_default = {4},
                        .check =
                            [](const std::vector<std::uint64_t>& v, const std::string& what) {
                              for (auto x : v)
                                if (x == 0 || x > 16)
                                  throw InputError(what + " must be between 1 and 16, got " + std::to_string(x));
                            },
                        .alias = "--new-tokens"},
               AxisDecl{.name = "context_dist",
                        .help = "how contexts spread within a batch: fixed, uniform:F or lognormal:SIG (mean the "
                                "context)",
                        .text = true,
                        .gpu_text = {"lognormal:1"},
                        .cpu_text = {"lognormal:1"},
                        .check_text =
                            [](const std::vector<std::string>& v, const std::string&) {
                              for (const auto& t : v) parse_context_dist(t);
                            },
                        .alias = "--context-dist"},
               page_size_axis()},
      .points = [](const SweepScope& sc) {
        const ModelConfig& m = *sc.model;
        const auto P = sc.axes->one("page_size");
        std::vector<std::uint64_t> steps{1};
        for (auto S : (*sc.axes)["new_tokens"])
          if (S > 1 && std::find(steps.begin(), steps.end(), S) == steps.end()) steps.push_back(S);
        std::vector<ContextDist> dists{ContextDist{}};
        for (const auto& t : sc.axes->text("context_dist")) {
          const auto d = parse_context_dist(t);
          if (std::find(dists.begin(), dists.end(), d) == dists.end()) dists.push_back(d);
        }
        std::vector<Point> pts;
        for (const bool paged : {false, true}) {
          if (!sc.runs(decode_attention_request({1, m.heads, m.kv_heads, 1, m.head_dim}, sc.dtype, paged, P), Impl::own))
            continue;  // ours only here
          for (auto B : (*sc.axes)["batch"])
            for (auto L : (*sc.axes)["context"])
              for (auto S : steps)
                for (const auto& d : dists) {
                  if (S > L)
                    throw InputError("--new-tokens " + std::to_string(S) + " does not fit a context of " +
                                     std::to_string(L) + " tokens (axes decode_attention_multi.new_tokens and .context, "
                                     "the old --new-tokens and --multi-contexts): the context includes the step's new "
                                     "tokens, so use contexts of at least " + std::to_string(S));
                  auto r = decode_attention_request({B, m.heads, m.kv_heads, L, m.head_dim}, sc.dtype, paged, P);
                  set_decode_steps(r, S, d);
                  std::vector<PointArg> args{{"batch", B, "batch"}, {"context", L, "context"}};
                  if (paged) args.push_back({"page_size", P, "page"});
                  args.push_back({"new_tokens", S, "new_tokens"});
                  args.push_back({"context_dist", 0, "context_dist", d.text()});
                  pts.push_back(make_point("decode", m.name, "", m.name, r,
                                           args, false));
                }
        }
        return pts;
      }});
}
