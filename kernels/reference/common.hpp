#pragma once
// Plain CPU references, written for clarity, not speed: every kernel of every
// backend is checked against these on random data before it is timed. Inputs
// are floats already decoded from their storage type; accumulation is double.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "phasebench/dtype.hpp"

namespace phasebench::reference {

// Decode a buffer of `n` elements stored as `t` into floats.
std::vector<float> to_float(const void* data, DType t, std::size_t n);
// Encode floats into storage type `t` (round to nearest even).
void from_float(const float* in, DType t, std::size_t n, void* out);
// Round a float through storage type `t` and back.
float round_to(float v, DType t);
// Fill `n` elements of storage type `t` with numeric::random_value(seed, i, scale).
void fill_random(void* data, DType t, std::size_t n, std::uint64_t seed, float scale);

// Y[m,n] of Y = X W^T (X is M x K, W is N x K, row-major). Returns the value
// and, in *abs_sum, sum |x*w| for the tolerance.
double linear_element(const float* X, const float* W, std::size_t K, std::size_t m, std::size_t n, double* abs_sum);

// Weight-only int4 (ops/linear_int4.hpp's layout: q [N][K/2] nibbles, bf16
// scales [N][K/G], 4-bit zeros packed over n*(K/G)+g): fill_int4 writes seeded
// random weights, scales near 1/8 and zeros; int4_weight_row dequantizes row n
// to K floats, (q - z) * s.
void fill_int4(std::uint8_t* q, std::uint16_t* scales, std::uint8_t* zeros, std::size_t N, std::size_t K, std::size_t G,
               std::uint64_t seed);
std::vector<float> int4_weight_row(const std::uint8_t* q, const std::uint16_t* scales, const std::uint8_t* zeros,
                                   std::size_t n, std::size_t K, std::size_t G);
// Checks an int4 linear layer's output at `positions` (m, n): `got(m, n)` against
// linear_element of X's row m (M x K floats) and W's row n dequantized (each
// row once), with bf16 tolerances; throws VerificationError naming `what`.
void check_int4_linear(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& positions, const float* X,
                       const std::uint8_t* q, const std::uint16_t* scales, const std::uint8_t* zeros, std::size_t K,
                       std::size_t G, const std::function<float(std::uint64_t, std::uint64_t)>& got,
                       const std::string& what);

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

// One query head of decode attention: out[D] = softmax(q.K^T * scale) V over
// L keys; key(l) and value(l) return pointers to the D floats of token l.
void decode_attention_head(const float* q, std::size_t L, std::size_t D, float scale,
                           const std::function<const float*(std::size_t)>& key,
                           const std::function<const float*(std::size_t)>& value, float* out);

// The per-KV-head scales of an fp8 KV cache in the benchmarks and tests: K's for
// heads 0..Hkv-1, then V's (2*Hkv floats; a value is e4m3 x its head's scale).
// Distinct, and mostly not 1, so a kernel that drops or swaps them fails.
std::vector<float> kv_head_scales(std::size_t Hkv);

// Causal attention for query position i (0-based) of a prompt: attends keys 0..i.
void prefill_attention_row(const float* q, std::size_t i, std::size_t D, float scale,
                           const std::function<const float*(std::size_t)>& key,
                           const std::function<const float*(std::size_t)>& value, float* out);

// Prompt rows worth checking in a causal attention output computed in tiles of
// `tile` rows: the first two, both sides of the first tile edge, the last
// tile's first two, the middle and the last two (those below S, ascending).
std::vector<std::uint64_t> prefill_rows_to_check(std::uint64_t S, std::uint64_t tile);

// Tolerances for comparing an output stored as `t`: |got - want| <= atol + rtol*|want|.
struct Tolerance {
  double atol = 0, rtol = 0;
};
Tolerance tolerance_for(DType out_type);

// Throws VerificationError naming `what`, the first bad index and both values
// when any element is out of tolerance; `scale[i]` (optional) multiplies atol
// per element (e.g. the sum of |x*w| of a dot product).
void check_close(const std::vector<float>& got, const std::vector<double>& want, Tolerance tol, const std::string& what,
                 const std::vector<double>* scale = nullptr);

// check_close for attention outputs, rows of `row_len` (one query head each):
// atol is scaled by each reference row's RMS. An attention output is a
// softmax-weighted mean of V rows, of size ~1/sqrt(context), so a fixed atol
// would accept almost anything (even zeros) at long contexts.
void check_rows_close(const std::vector<float>& got, const std::vector<double>& want, std::size_t row_len, Tolerance tol,
                      const std::string& what);


// One query head of MLA decode attention, absorbed form (ops/latent_attention.hpp):
// out[R] = softmax(q . C^T * scale) C[:, :R] over L latent rows of R + P
// elements; latent(l) returns a pointer to the R + P floats of token l, q has
// R + P. Double accumulation.
void latent_attention_head(const float* q, std::size_t L, std::size_t R, std::size_t P, float scale,
                           const std::function<const float*(std::size_t)>& latent, double* out);

}  // namespace phasebench::reference
