// The MoE experts operation (ops/moe.hpp): the routed experts of a mixture-of-
// experts layer over T tokens, with its drawn routing's token counts per expert
// in the results' "shape". One sweep group, moe: for each mixture-of-experts
// model (the MoE models of --model, else Mixtral, Qwen3-30B-A3B and
// DeepSeek-V2-Lite on a GPU, Qwen3-30B-A3B on a CPU) and each routing, decode at
// each batch (T = batch, one token per sequence) and prefill at each prompt (one
// sequence, T = prompt).
#include "phasebench/ops/moe.hpp"

#include <cmath>
#include <stdexcept>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/step_time.hpp"

namespace phasebench {

float moe_weight_scale(std::uint64_t K) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(K))); }

OpRequest moe_request(const MoeShape& s, const Routing& routing, DType dtype, Impl impl, Phase phase, std::uint64_t seed) {
  if (s.E == 0 || s.k == 0 || s.k > s.E) throw InputError("moe: experts per token must be 1 to E");
  routing_inclusion(s.E, s.k, routing);  // InputError when the routing cannot give k distinct experts
  OpRequest r;
  r.kind = kMoe;
  r.dtype = dtype;
  r.impl = impl;
  r.phase = phase;
  r.shape = s.shape();
  r.options = OpOptions(MoeOptions{routing});
  r.seed = seed;
  return r;
}

Routing moe_routing(const OpRequest& r) { return r.options.as<MoeOptions>().routing; }

RoutedTokens moe_routed(const OpRequest& r) {
  const auto s = MoeShape::of(r.shape);
  return route_tokens(s.T, s.k, s.E, moe_routing(r), r.seed + 7);
}

MoeCost moe_cost(const OpRequest& r) {
  const auto s = MoeShape::of(r.shape);
  const auto f = WeightFormat::plain(r.dtype);
  return moe_cost(s, static_cast<double>(moe_routed(r).touched()), f, f, element_bytes(r.dtype));
}

std::optional<std::uint64_t> moe_batch_at_intensity(const MoeShape& s, const Routing& routing, DType t, double ridge) {
  const auto f = WeightFormat::plain(t);
  return first_batch_where([&](std::uint64_t B) {
    MoeShape b = s;
    b.T = B;
    const double touched = expected_experts_touched(s.E, s.k, B, routing);
    return moe_cost(b, touched, f, f, element_bytes(t)).total().intensity() >= ridge;
  });
}

namespace {

// Inputs, every expert's weights (memory counts them all), the intermediates
// and the routing's maps and weights.
std::uint64_t footprint(const OpRequest& r) {
  const auto s = MoeShape::of(r.shape);
  const auto e = element_bytes(r.dtype);
  const auto rows = mul(s.T, s.k, "routed tokens");
  std::uint64_t b = mul({e, s.E, 3, s.h, s.I}, "MoE weight bytes");
  b = add(b, mul({e, s.T, s.h, 2}, "MoE input and output bytes"));
  b = add(b, mul({e, rows, add(mul(2, s.h), mul(3, s.I))}, "MoE intermediate bytes"));
  return add(b, mul(12, rows, "MoE routing bytes"));
}

nlohmann::json shape_json(const OpRequest& r) {
  auto j = r.shape.to_json();
  const auto routed = moe_routed(r);
  j["routing"] = moe_routing(r).text();
  j["experts_touched"] = routed.touched();
  j["tokens_per_expert"] = routed.per_expert;
  return j;
}

}  // namespace

namespace {

// Serving (step_time.hpp): the routed experts (permute, grouped GEMMs, SiLU*up,
// combine) under uniform routing, on the curve of E, k, h, I and type, along the
// tokens; each of the model's experts_* ops takes the whole layer's efficiency.
std::string moe_curve(std::uint64_t E, std::uint64_t k, std::uint64_t h, std::uint64_t I, const std::string& dtype) {
  return "moe/" + std::to_string(E) + "/" + std::to_string(k) + "/" + std::to_string(h) + "/" + std::to_string(I) + "/" +
         dtype;
}

std::optional<StepMatch> moe_point(const nlohmann::json& p) {
  const auto T = point_size(p, "T"), k = point_size(p, "k"), E = point_size(p, "E"), h = point_size(p, "h"),
             I = point_size(p, "I");
  if (!T || !k || !E || !h || !I) return std::nullopt;
  if (p.contains("shape") && p["shape"].value("routing", "uniform") != "uniform") return std::nullopt;
  return StepMatch{moe_curve(*E, *k, *h, *I, point_dtype(p)), {static_cast<double>(*T)}};
}

std::optional<StepMatch> moe_step_op(const StepOpView& v) {
  if (v.op.name.rfind("experts_", 0) != 0 || v.model.routing.kind != Routing::Kind::uniform) return std::nullopt;
  // Plain experts in the activations' type only: quantized ones are not what the points ran.
  const auto w = v.precision.format_of("experts_gate_up");
  if (w.quantized() || w.compute != v.dtype) return std::nullopt;
  const auto& m = v.model;
  return StepMatch{moe_curve(m.experts, m.experts_per_token, m.hidden, m.expert_intermediate, std::string(to_string(v.dtype))),
                   {static_cast<double>(v.tokens)}};
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(moe) {
  using namespace phasebench;
  OpDecl d{kMoe, {"T", "k", "E", "h", "I"}, [](const OpRequest& r) { return moe_cost(r).total(); }, footprint, shape_json,
           {"moe_experts"}};
  d.match_point = moe_point;
  d.match_step_op = moe_step_op;
  registry.declare(std::move(d));
  registry.group(SweepGroup{
      .name = "moe",
      .help = "the routed experts of each mixture-of-experts model's MoE layer (permute, grouped gate_up, SiLU*up, "
              "grouped down, combine) per routing: decode over batch, prefill over prompt (vendor library)",
      .order = 40,
      .takes = [](const ModelConfig& m) { return m.experts > 0; },
      .takes_what = "mixture-of-experts models",
      // The smallest experts on a CPU.
      .gpu_models = {"mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite"},
      .cpu_models = {"qwen3-30b-a3b"},
      .axes = {AxisDecl{.name = "batch",
                        .help = "decode batch sizes (one token per sequence)",
                        .gpu_default = {1, 4, 16, 64, 256, 1024, 2048, 4096, 8192},
                        .cpu_default = {1, 8, 64},
                        .alias = "--moe-decode-batches"},
               AxisDecl{.name = "prompt",
                        .help = "prefill prompt lengths (one sequence: its tokens are the layer's)",
                        .gpu_default = {512, 2048, 8192},
                        .cpu_default = {64},
                        .alias = "--moe-prompts"},
               AxisDecl{.name = "routing",
                        .help = "how tokens are routed: uniform, zipf:S (popularity 1/rank^S) or hot:F (a fraction F "
                                "of the tokens to one hot expert)",
                        .text = true,
                        .gpu_text = {"uniform"},
                        .cpu_text = {"uniform"},
                        .check_text =
                            [](const std::vector<std::string>& v, const std::string&) {
                              for (const auto& t : v) parse_routing(t);
                            },
                        .alias = "--routing"}},
      .points = [](const SweepScope& sc) {
        std::vector<Point> pts;
        const ModelConfig& m = *sc.model;
        const std::string target = "experts";
        for (const auto& rt : sc.axes->text("routing")) {
          const Routing routing = parse_routing(rt);
          auto add = [&](Phase phase, std::uint64_t T, const std::vector<PointArg>& args) {
            const MoeShape s{T, m.experts_per_token, m.experts, m.hidden, m.expert_intermediate};
            OpRequest r = moe_request(s, routing, sc.dtype, Impl::blas, phase);
            for (Impl impl : sc.impls(r, true)) {
              r.impl = impl;
              pts.push_back(
                  make_point(std::string(to_string(phase)), m.name, target, m.name + "." + target, r, args, true));
            }
          };
          for (auto B : (*sc.axes)["batch"])
            add(Phase::decode, B, {{"batch", B, "batch"}, {"routing", 0, "routing", routing.text()}});
          for (auto S : (*sc.axes)["prompt"])
            add(Phase::prefill, S, {{"batch", 1, ""}, {"prompt", S, "prompt"}, {"routing", 0, "routing", routing.text()}});
        }
        return pts;
      }});
}
