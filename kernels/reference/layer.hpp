#pragma once
// The reference of a whole transformer layer (ops/layer.hpp), one token at a
// time: its 16-bit weights and the steps between the attention (linear, RMSNorm,
// RoPE, SiLU-and-multiply), each output rounded to the storage type where the
// kernels round it, so the reference follows the same chain; sums in double.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "phasebench/dtype.hpp"

namespace phasebench::reference {

// The layer's weights as the device stores them (bf16 or fp16, row-major [N, K]).
struct LayerWeights {
  DType t;
  std::vector<std::uint16_t> attn_norm, qkv, o, mlp_norm, gate_up, down;
  float dec(std::uint16_t b) const;
};

// y[n] = round(sum_k x[k] W[n, k]) for n < N (unrounded without round_out);
// abs[n] = sum_k |x[k] W[n, k]|, the tolerance's scale.
void layer_linear(const LayerWeights& w, const std::vector<std::uint16_t>& W, const std::vector<float>& x, std::size_t N,
                  std::vector<float>& y, std::vector<double>* abs, bool round_out = true);

// RMSNorm: x / sqrt(mean(x^2) + eps) * g, rounded.
std::vector<float> layer_rmsnorm(const LayerWeights& w, const std::vector<float>& x, const std::vector<std::uint16_t>& g,
                                 float eps);

// NeoX rotate-half RoPE of one head (D values) at position pos, in place, rounded
// to t. The angle is formed in float as the kernel forms it (pos *
// theta^(-2i/D)), then sin/cos in double. `abs` (the projection's |x*w| sums)
// becomes each rotated element's tolerance scale: the sum of its two inputs'.
void layer_rope(DType t, float* x, double* abs, int D, int pos, float theta);

// SiLU(gate) * up over gate_up [2I], rounded; silu(g) = g / (1 + e^-g).
std::vector<float> layer_silu_mul(DType t, const std::vector<float>& gu);

}  // namespace phasebench::reference
