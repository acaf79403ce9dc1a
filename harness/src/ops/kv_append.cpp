// KV append: S new tokens' K and V per sequence written into the cache (DESIGN:
// 0 FLOPs; a*2*B*S*Hkv*D read, c*2*B*S*Hkv*D written; paged: plus an int32 block
// table read per token). New k and v [B, S, Hkv, D]; the cache holds `capacity`
// tokens per sequence and the tokens go at its end. One sweep group: the decode
// step's append over batch, contiguous and paged, for every model of the run.
#include "phasebench/checked.hpp"
#include "phasebench/ops/kv_append.hpp"
#include "phasebench/ops/shared_axes.hpp"
#include "phasebench/step_time.hpp"

namespace phasebench {

OpRequest kv_append_request(const KvAppendShape& s, DType dtype, std::uint64_t capacity, bool paged,
                            std::uint64_t page_size, std::uint64_t seed) {
  OpRequest r;
  r.kind = paged ? kKvAppendPaged : kKvAppend;
  r.phase = s.S == 1 ? Phase::decode : Phase::prefill;
  r.dtype = dtype;
  r.impl = Impl::own;
  r.shape = s.shape();
  r.options = OpOptions(KvAppendOptions{capacity, paged ? page_size : 0});
  r.seed = seed;
  return r;
}

namespace {

OpCost cost(const OpRequest& r) {
  const auto e = element_bytes(r.dtype);
  const auto s = KvAppendShape::of(r.shape);
  return r.kind == kKvAppendPaged ? kv_append_paged_cost(s, e, e) : kv_append_cost(s, e, e);
}

// The whole cache (paged: whole pages) and the new tokens.
std::uint64_t footprint(const OpRequest& r) {
  const auto s = KvAppendShape::of(r.shape);
  const auto& p = r.options.as<KvAppendOptions>();
  std::uint64_t cap = p.capacity;
  if (r.kind == kKvAppendPaged) cap = mul(pages_per_sequence(cap, p.page_size), p.page_size);
  return add(mul({element_bytes(r.dtype), 2, s.B, s.Hkv, cap, s.D}, "KV-cache bytes"), cost(r).bytes.total());
}

}  // namespace

namespace {

// Serving (step_time.hpp): the append of B*S tokens' K and V, on the curve of the
// KV heads, head_dim and cache type, along the tokens appended.
std::string append_curve(std::uint64_t Hkv, std::uint64_t D, const std::string& dtype) {
  return "kv_append/" + std::to_string(Hkv) + "/" + std::to_string(D) + "/" + dtype;
}

std::optional<StepMatch> append_point(const nlohmann::json& p) {
  const auto B = point_size(p, "B"), S = point_size(p, "S"), Hkv = point_size(p, "Hkv"), D = point_size(p, "D");
  if (!B || !S || !Hkv || !D) return std::nullopt;
  return StepMatch{append_curve(*Hkv, *D, point_dtype(p)), {static_cast<double>(*B * *S)}};
}

std::optional<StepMatch> append_step_op(const StepOpView& v) {
  const auto& s = v.op.shape;
  if (v.op.kind != "kv_append" || !s.has("Hkv")) return std::nullopt;  // MLA's latent append is another shape
  return StepMatch{append_curve(s["Hkv"], s["D"], std::string(to_string(v.kv_dtype))),
                   {static_cast<double>(s["B"] * s["S"])}};
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(kv_append) {
  using namespace phasebench;
  for (const char* kind : {kKvAppend, kKvAppendPaged}) {
    OpDecl d{kind, {"B", "S", "Hkv", "D"}, cost, footprint, {}};
    d.match_point = append_point;
    d.match_step_op = append_step_op;
    registry.declare(std::move(d));
  }
  registry.group(SweepGroup{
      .name = "kv_append",
      .help = "the decode step's KV append over batch into a cache of context tokens, contiguous and paged",
      .order = 40,
      .axes = {AxisDecl{.name = "batch",
                        .help = "batch sizes",
                        .gpu_default = {1, 16, 64, 256},
                        .cpu_default = {1, 16, 64},
                        .alias = "--append-batches"},
               AxisDecl{.name = "context",
                        .help = "cache length (tokens) it writes into, at its end",
                        .single = true,
                        .gpu_default = {4096},
                        .cpu_default = {1024},
                        .alias = "--append-context"},
               page_size_axis()},
      .points = [](const SweepScope& sc) {
        const ModelConfig& m = *sc.model;
        const auto C = sc.axes->one("context"), P = sc.axes->one("page_size");
        std::vector<Point> pts;
        for (const bool paged : {false, true}) {
          if (!sc.runs(kv_append_request({1, 1, m.kv_heads, m.head_dim}, sc.dtype, C, paged, P), Impl::own)) continue;
          for (auto B : (*sc.axes)["batch"]) {
            std::vector<PointArg> args{{"batch", B, "batch"}, {"context", C, "context"}};
            if (paged) args.push_back({"page_size", P, "page"});
            pts.push_back(make_point("decode", m.name, "", m.name,
                                     kv_append_request({B, 1, m.kv_heads, m.head_dim}, sc.dtype, C, paged, P), args,
                                     false));
          }
        }
        return pts;
      }});
}
