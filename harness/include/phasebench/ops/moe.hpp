#pragma once
// The routed experts of a mixture-of-experts layer (harness/src/ops/moe.cpp):
// T tokens [T, h], each routed to k of E experts by a seeded distribution
// (routing.hpp); every expert a gated MLP, gate_up [2I, h] (gate rows 0..I-1, up
// rows I..2I-1) and down [h, I]; Y[t] = sum_j w_tj * down_e(SiLU(gate_e x_t) *
// up_e x_t) over token t's experts e = expert[t, j]. Run as five steps (permute,
// grouped gate_up GEMM, activation, grouped down GEMM, combine) with the costs of
// moe_experts_cost (workload.hpp). Activations and weights in the request's
// dtype, intermediates too; the combine weights fp32.
#include <cstdint>
#include <optional>

#include "phasebench/op.hpp"
#include "phasebench/report.hpp"
#include "phasebench/routing.hpp"

namespace phasebench {

inline constexpr const char* kMoe = "moe";

// A MoE request's options (OpRequest::options).
struct MoeOptions {
  Routing routing{};  // how tokens choose their experts (drawn from the request's seed)
};

// The weights' fill scale: 1/sqrt(K) of each GEMM, so that outputs stay O(1)
// and fp16 intermediates cannot overflow at any model width.
float moe_weight_scale(std::uint64_t K);

OpRequest moe_request(const MoeShape& s, const Routing& routing, DType dtype, Impl impl, Phase phase,
                      std::uint64_t seed = 0x5eed);
// The request's routing, and the routing it draws (from its seed).
Routing moe_routing(const OpRequest& r);
RoutedTokens moe_routed(const OpRequest& r);
// The request's cost with the experts its drawn routing touches.
MoeCost moe_cost(const OpRequest& r);

// Decode: the smallest batch B (one token per sequence, T = B) at which the
// routed experts of shape `s` (its T ignored) in element type `t` reach
// intensity `ridge` FLOP/byte, with the experts `routing` is expected to touch
// (expected_experts_touched): where decode MoE crosses from memory- to
// compute-bound on a roofline of that ridge. The intensity grows with B (the
// experts touched grow slower than B). Nothing when not before B = 2^24.
std::optional<std::uint64_t> moe_batch_at_intensity(const MoeShape& s, const Routing& routing, DType t, double ridge);

// The decode MoE crossings (context.phasebench.decode_moe_crossings): one record
// per (model, routing, dtype) with "ok" decode points among `standing`: layer
// ("<model>.experts"), model, routing, dtype, k, E, h, I, batches, measured (the
// crossing batch from moe_batch_at_intensity at P_eff/W_eff, as the linear
// crossings), predicted (per ceiling source: the batch where the expected experts
// touched put the intensity at the ridge, with `dense_batch`: where one expert's
// gate_up, as a dense layer, reaches the same ridge), ceiling_used.
nlohmann::json decode_moe_crossings(const Standing& standing, const nlohmann::json& run);

}  // namespace phasebench
