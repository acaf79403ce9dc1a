#pragma once
// Elementwise kernels of a transformer layer (for the whole-layer benchmark):
// RMSNorm, rotary embedding (NeoX rotate-half) in place on a fused QKV buffer,
// and SiLU(gate) * up. bf16/fp16 storage, fp32 math, 16-byte vector accesses.
// Plain launchers: enqueue on `stream`, no synchronisation; each throws
// Unsupported for a dtype or shape it does not take.
#include <cuda_runtime.h>

#include <cstdint>

#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

// out[m, :] = x[m, :] / sqrt(mean_j x[m, j]^2 + eps) * weight[:]; x, out [M, H], weight [H].
// H a multiple of 8. One CTA per row.
void launch_rmsnorm(DType dtype, const void* x, const void* weight, void* out, int M, int H, float eps,
                    cudaStream_t stream);

// In place on qkv [M, (Hq + 2*Hkv) * D] (q heads, then k heads, then v heads of
// each token): every q and k head of token m is rotated by position positions[m]
// (int32, device memory), NeoX style: for i < D/2, with a = pos * theta^(-2i/D),
//   x[i]       <- x[i] cos a - x[i + D/2] sin a
//   x[i + D/2] <- x[i + D/2] cos a + x[i] sin a.
// v heads are untouched. D a multiple of 16.
void launch_rope_neox(DType dtype, void* qkv, const std::int32_t* positions, int M, int Hq, int Hkv, int D,
                      float theta, cudaStream_t stream);

// out[m, i] = silu(gate_up[m, i]) * gate_up[m, I + i]; gate_up [M, 2I], out [M, I];
// silu(g) = g / (1 + e^-g). I a multiple of 8.
void launch_silu_mul(DType dtype, const void* gate_up, void* out, int M, int I, cudaStream_t stream);

}  // namespace phasebench::cuda
