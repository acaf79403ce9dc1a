#pragma once
// The reference of a MoE layer's routed experts (ops/moe.hpp): which tokens to
// check and the check of their outputs, in double from the stored inputs.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "phasebench/dtype.hpp"

namespace phasebench::reference {

// The routed experts of a MoE layer (ops/moe.hpp) for token t: y[c] = sum_j
// w_tj * sum_i act_i * down_e[c][i], act_i = SiLU(gate_e[i] . x) * (gate_e[I+i]
// . x), e = expert[t*k + j]; everything in double from the stored inputs (no
// intermediate rounding: the tolerance's scale covers the kernels' bf16/fp16
// intermediates). Inputs through callbacks, so a GPU op can regenerate its
// seeded weights on the host instead of downloading them.
struct MoeInputs {
  std::size_t h = 0, I = 0, k = 0;
  const std::uint32_t* expert = nullptr;  // [T*k]
  const float* weight = nullptr;          // [T*k]
  std::function<void(std::uint64_t t, float* out)> x;                           // h inputs of token t
  std::function<void(std::uint64_t e, std::uint64_t row, float* out)> gate_up;  // row of expert e's [2I, h]
  std::function<void(std::uint64_t e, std::uint64_t row, float* out)> down;     // row of expert e's [h, I]
};
// Tokens worth checking: the first and the last, and enough others that every
// expert with tokens is checked through at least one of them (in token order).
std::vector<std::uint64_t> moe_tokens_to_check(const std::uint32_t* expert, std::size_t T, std::size_t k);
// Checks every output column of `tokens` (got(t, c)) against the reference with
// out_type's tolerance, atol scaled by sum_j w_j sum_i |act_i down_e[c][i]|;
// throws VerificationError naming `what`, the token and the column.
void check_moe(const MoeInputs& in, const std::vector<std::uint64_t>& tokens, DType out_type,
               const std::function<float(std::uint64_t t, std::uint64_t c)>& got, const std::string& what);

}  // namespace phasebench::reference
