#pragma once
// The linear layer operation (harness/src/ops/linear.cpp): Y[M,N] = X[M,K] W^T,
// benchmarked as prefill GEMMs, decode GEMVs and free-form shapes.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kLinear = "linear";

OpRequest linear_request(const LinearShape& s, DType dtype, Impl impl, std::uint64_t seed = 0x5eed);

// A weight-only decode GEMV's request (linear_int4, linear_fp4): bf16 activations,
// the weights' format in `options`.
OpRequest weight_only_gemv_request(const char* kind, const LinearShape& s, OpOptions options, Impl impl,
                                   std::uint64_t seed);

// The decode linear crossings (context.phasebench.decode_linear_crossings, results
// schema 2): one record per decode linear layer (model, target, dtype) with "ok"
// decode points among `standing`:
//   layer, model, target, dtype, N, K, batches (the batches measured);
//   measured: the batch where the intensity reaches P_eff/W_eff, the best FLOP/s
//     and the best bytes/s the layer achieved over its batches (the fastest point
//     of each batch, any impl) - null with text "> B" while the largest batch B
//     still moves 70% of W_eff, "one batch only", or "never" (beyond 2^24);
//   predicted: per ceiling source of the points' roofline_by_source, and for the
//     ceilings in use (ceiling_used, `run`'s ceiling_used), the batch where the
//     intensity reaches that ridge P/W, with the ridge (none without ceilings);
//   ceiling_used.
// Intensities count the output in linear_output_type (fp8 writes bf16).
nlohmann::json decode_linear_crossings(const Standing& standing, const nlohmann::json& run);

// Our own decode GEMVs of bf16 activations that ran, of kind `op` (kLinear, or a
// weight-only GEMV's): f(the point's args, "model.target", batch, median seconds).
// What the summaries comparing a weight format with bf16 read (linear_int4, linear_fp4).
void for_each_own_decode_gemv(const Standing& standing, std::string_view op,
                              const std::function<void(const nlohmann::json& args, const std::string& layer,
                                                       std::uint64_t batch, double median_s)>& f);

}  // namespace phasebench
