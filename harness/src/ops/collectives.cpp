// The collectives (ops/collectives.hpp): all_reduce, all_gather, reduce_scatter,
// all_to_all over N GPUs through NCCL. Cost per GPU: the reductions' additions
// (all_reduce and reduce_scatter: count (n-1)/n) and the minimum HBM traffic of one
// rank (its send buffer read once, its receive buffer written once); what limits a
// collective is the link, which the point report adds (algorithm and bus bandwidth,
// nccl-tests' factors, against the spec's link). Two groups: `collectives`, the sizes
// a model's sharding makes (the decode and prefill all-reduce of each layer, the
// logits all-gather, MoE dispatch as an all-to-all), and `collectives_sizes`,
// nccl-tests' power-of-two sweep.
#include <algorithm>
#include <array>
#include <string>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/model.hpp"
#include "phasebench/ops/collectives.hpp"
#include "phasebench/ops/shared_axes.hpp"
#include "phasebench/step_time.hpp"

namespace phasebench {

namespace {

constexpr std::array<const char*, 4> kKinds = {kAllReduce, kAllGather, kReduceScatter, kAllToAll};

OpCost cost(const OpRequest& r) {
  const auto count = r.shape["count"], n = r.shape["gpus"], a = element_bytes(r.dtype);
  const auto [in, out] = collective_rank_elements(r.kind, count, n);
  OpCost c;
  if (r.kind == kAllReduce || r.kind == kReduceScatter) c.flops = count / n * (n - 1);
  c.bytes.activations = mul(in, a, "collective bytes");
  c.bytes.writes = mul(out, a, "collective bytes");
  return c;
}

std::uint64_t footprint(const OpRequest& r) {
  const auto count = r.shape["count"], n = r.shape["gpus"], a = element_bytes(r.dtype);
  const auto [in, out] = collective_rank_elements(r.kind, count, n);
  return mul(add(in, out, "collective elements"), a, "collective bytes");  // one rank's (device 0's)
}

void check_positive(const std::vector<std::uint64_t>& v, const std::string& what) {
  for (auto x : v)
    if (x == 0) throw InputError(what + ": sizes of at least 1");
}

void check_kinds(const std::vector<std::string>& v, const std::string& what) {
  for (const auto& k : v)
    if (!is_collective(k))
      throw InputError(what + ": unknown collective '" + k + "'; use all_reduce, all_gather, reduce_scatter or all_to_all");
}

// Rounded down to a multiple of n (nccl-tests does the same to its sizes), at least n.
std::uint64_t whole(std::uint64_t count, std::uint64_t n) { return std::max(n, count / n * n); }

// Serving (step_time.hpp): measured collectives on the curve of kind, GPU count and
// type, along the message's bytes, as times (a time curve: the link bounds them, not
// the roofline); the model's all_reduce and all_gather ops (shape {bytes, gpus}) land
// on the same curves.
std::optional<StepMatch> collective_point(const nlohmann::json& p) {
  const auto count = point_size(p, "count"), n = point_size(p, "gpus");
  const auto kind = p.value("op_kind", p.value("op", std::string()));
  if (!count || !n || !is_collective(kind)) return std::nullopt;
  const auto t = point_dtype(p);
  std::uint64_t a = 0;
  for (DType d : {DType::bf16, DType::fp16, DType::fp32})
    if (to_string(d) == t) a = element_bytes(d);
  if (a == 0) return std::nullopt;  // a type the collectives do not run
  return StepMatch{kind + "/" + std::to_string(*n) + "/" + t, {static_cast<double>(*count) * static_cast<double>(a)}, true};
}

std::optional<StepMatch> collective_step_op(const StepOpView& v) {
  if (!is_collective(v.op.kind) || !v.op.shape.has("bytes") || !v.op.shape.has("gpus")) return std::nullopt;
  return StepMatch{v.op.kind + "/" + std::to_string(v.op.shape["gpus"]) + "/" + std::string(to_string(v.dtype)),
                   {static_cast<double>(v.op.shape["bytes"])}, true};
}

Point collective_point_of(const std::string& phase, const std::string& model, const std::string& target,
                          std::string_view kind, std::uint64_t count, std::uint64_t n, DType t,
                          std::vector<PointArg> args, const SweepScope& sc, bool* runs) {
  OpRequest r = collective_request(kind, count, n, t, phase == "prefill" ? Phase::prefill : Phase::decode);
  r.impl = Impl::nccl;
  *runs = sc.runs(r, Impl::nccl);
  args.insert(args.begin(), PointArg{"gpus", n, "gpus"});
  // The subject: "<model>.<target>" (the model's op), or "sizes" (the power-of-two sweep).
  return make_point(phase, model, target, target.empty() ? "sizes" : model + "." + target, r, args, false);
}

}  // namespace

std::pair<std::uint64_t, std::uint64_t> collective_rank_elements(std::string_view kind, std::uint64_t count,
                                                                 std::uint64_t gpus) {
  if (kind == kAllGather) return {count / gpus, count};
  if (kind == kReduceScatter) return {count, count / gpus};
  return {count, count};  // all_reduce, all_to_all
}

bool is_collective(std::string_view kind) {
  return std::find(kKinds.begin(), kKinds.end(), kind) != kKinds.end();
}

OpRequest collective_request(std::string_view kind, std::uint64_t count, std::uint64_t gpus, DType dtype, Phase phase,
                             std::uint64_t seed) {
  if (!is_collective(kind)) throw std::logic_error("collective_request: not a collective: " + std::string(kind));
  OpRequest r;
  r.kind = std::string(kind);
  r.phase = phase;
  r.dtype = dtype;
  r.impl = Impl::nccl;
  r.shape = {{"count", count}, {"gpus", gpus}};
  r.seed = seed;
  return r;
}

double bus_factor(std::string_view kind, std::uint64_t gpus) {
  const double n = static_cast<double>(gpus);
  if (gpus <= 1) return 0;
  return kind == kAllReduce ? 2 * (n - 1) / n : (n - 1) / n;
}

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(collectives) {
  using namespace phasebench;
  for (const char* k : {kAllReduce, kAllGather, kReduceScatter, kAllToAll}) {
    OpDecl d{k, {"count", "gpus"}, cost, footprint, {}};
    d.libraries = {Impl::nccl};
    d.match_point = collective_point;
    d.match_step_op = collective_step_op;
    registry.declare(std::move(d));
  }
  const AxisDecl gpus = gpus_axis("GPUs (NCCL ranks, one a GPU) each collective spans", {2, 4, 8}, {2});
  registry.group(SweepGroup{
      .name = "collectives",
      .help = "NCCL collectives at the sizes the model's sharding makes: each layer's decode and prefill all-reduce, the "
              "logits all-gather, MoE dispatch as an all-to-all (GPU counts: --gpus N,...)",
      .order = 90,
      .on_request = true,
      .axes = {gpus,
               AxisDecl{.name = "batch",
                        .help = "decode batches (one token a sequence): the decode all-reduce, logits and dispatch",
                        .gpu_default = {1, 8, 64, 256},
                        .cpu_default = {1, 8},
                        .check = check_positive},
               AxisDecl{.name = "tokens",
                        .help = "prefill tokens of a step (batch x prompt): the prefill all-reduce",
                        .gpu_default = {2048, 8192},
                        .cpu_default = {512},
                        .check = check_positive}},
      .points = [](const SweepScope& sc) {
        const ModelConfig& m = *sc.model;
        std::vector<Point> pts;
        auto add_point = [&](const std::string& phase, const std::string& target, std::string_view kind,
                             std::uint64_t count, std::uint64_t n, std::vector<PointArg> args) {
          bool runs = false;
          Point p = collective_point_of(phase, m.name, target, kind, count, n, sc.dtype, std::move(args), sc, &runs);
          if (runs) pts.push_back(std::move(p));
        };
        for (auto n : (*sc.axes)["gpus"]) {
          for (auto B : (*sc.axes)["batch"]) {
            // Row-parallel O and down projections end in an all-reduce of the hidden state.
            add_point("decode", "layer_all_reduce", kAllReduce, mul(B, m.hidden, "all-reduce elements"), n,
                      {{"batch", B, "batch"}});
            // The vocabulary-parallel lm_head's logits gathered (vocabulary padded to n ranks).
            add_point("decode", "logits_all_gather", kAllGather,
                      mul(B, (m.vocab + n - 1) / n * n, "all-gather elements"), n, {{"batch", B, "batch"}});
            // Expert parallelism: each token's hidden state to each of its experts' ranks (combine: the same again).
            if (m.experts > 0)
              add_point("decode", "moe_dispatch", kAllToAll,
                        whole(mul({B, m.experts_per_token, m.hidden}, "all-to-all elements"), n), n,
                        {{"batch", B, "batch"}});
          }
          for (auto T : (*sc.axes)["tokens"])
            add_point("prefill", "layer_all_reduce", kAllReduce, mul(T, m.hidden, "all-reduce elements"), n,
                      {{"tokens", T, "tokens"}});
        }
        return pts;
      }});
  registry.group(SweepGroup{
      .name = "collectives_sizes",
      .help = "NCCL collectives over a power-of-two size axis, as nccl-tests sweeps them (GPU counts: --gpus N,...)",
      .order = 91,
      .per_model = false,
      .on_request = true,
      .axes = {gpus,
               AxisDecl{.name = "collective",
                        .help = "which collectives",
                        .check = {},
                        .text = true,
                        .gpu_text = {kAllReduce, kAllGather, kReduceScatter, kAllToAll},
                        .cpu_text = {kAllReduce},
                        .check_text = check_kinds},
               AxisDecl{.name = "bytes",
                        .help = "message sizes in bytes (nccl-tests' size: rounded down to whole elements of every rank)",
                        .gpu_default = {4096, 65536, 1048576, 16777216, 268435456},
                        .cpu_default = {4096, 65536},
                        .check = check_positive}},
      .points = [](const SweepScope& sc) {
        std::vector<Point> pts;
        const auto a = element_bytes(sc.dtype);
        for (const auto& kind : sc.axes->text("collective"))
          for (auto n : (*sc.axes)["gpus"])
            for (auto bytes : (*sc.axes)["bytes"]) {
              const auto count = kind == kAllReduce ? std::max<std::uint64_t>(1, bytes / a) : whole(bytes / a, n);
              bool runs = false;
              Point p = collective_point_of("free", "custom", "", kind, count, n, sc.dtype,
                                            {{"bytes", count * a, "bytes"}}, sc, &runs);
              if (runs) pts.push_back(std::move(p));
            }
        return pts;
      }});
}
