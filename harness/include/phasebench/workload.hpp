#pragma once
// The one place where the shapes, FLOPs and minimum bytes of every operation are
// defined (docs/design.md, "FLOPs and minimum bytes"). Benchmarks, the analytical model and the
// tests all call these functions; nothing else computes FLOPs or bytes.
//
// "Minimum bytes" = every input read once, every output written once. FLOPs are
// exact integers; softmax, RoPE, norms and other elementwise work count 0 FLOPs
// (their bytes still count).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "phasebench/dtype.hpp"
#include "phasebench/shape.hpp"

namespace phasebench {

// Bytes split by what they are.
struct Bytes {
  std::uint64_t weights = 0;      // parameter reads
  std::uint64_t kv_cache = 0;     // KV-cache reads
  std::uint64_t activations = 0;  // activation reads (inputs, queries, new K/V)
  std::uint64_t block_table = 0;  // paged-KV index reads (block tables, slot mappings)
  std::uint64_t writes = 0;       // every byte written (outputs, KV-cache writes)
  std::uint64_t reads() const;
  std::uint64_t total() const;
  Bytes& operator+=(const Bytes& o);
  Bytes scaled(std::uint64_t n) const;
};

struct OpCost {
  std::uint64_t flops = 0;
  Bytes bytes;
  // FLOPs per byte of minimum traffic; 0 for an op with no FLOPs.
  double intensity() const;
  OpCost& operator+=(const OpCost& o);
  OpCost scaled(std::uint64_t n) const;
};

// Y[M,N] = X[M,K] W^T, W is N x K. `a_out` defaults to the input activation size.
struct LinearShape {
  std::uint64_t M = 0, N = 0, K = 0;
  static LinearShape of(const Shape& s) { return {s["M"], s["N"], s["K"]}; }
  Shape shape() const { return {{"M", M}, {"N", N}, {"K", K}}; }
};
OpCost linear_cost(const LinearShape& s, std::uint64_t w, std::uint64_t a_in, std::uint64_t a_out);
inline OpCost linear_cost(const LinearShape& s, std::uint64_t w, std::uint64_t a) { return linear_cost(s, w, a, a); }
// The same with weights stored in `w` (quantized formats: exact sub-byte sizes, scales and zeros).
OpCost linear_cost(const LinearShape& s, const WeightFormat& w, std::uint64_t a_in, std::uint64_t a_out);
// A block-scaled 4-bit GEMM (`t` nvfp4 or mxfp4: cuBLASLt's block-scaled matmul): X and
// W both in `t`, each with its block scales along K (and nvfp4's tensor scale):
// matrix_bytes(t, M, K) + matrix_bytes(t, N, K) read, Y written in linear_output_type(t).
OpCost block_scaled_linear_cost(const LinearShape& s, DType t);
// A mixture-of-experts linear layer: `tokens` tokens each routed to `k` experts,
// every expert an N x K linear: 2*tokens*k*N*K FLOPs; the weights of the experts
// touched (`touched`, expected_experts_touched: a fraction of an expert is the
// expected value) and each routed row read and written once.
OpCost grouped_linear_cost(std::uint64_t tokens, std::uint64_t k, std::uint64_t N, std::uint64_t K, double touched,
                           const WeightFormat& w, std::uint64_t a_in, std::uint64_t a_out);

// The routed experts of a mixture-of-experts layer (the MoE benchmark and the
// analytical model's MoE layers): T tokens, each routed to k of E experts, every
// expert a gated MLP of hidden size h and intermediate size I (gate_up [2I, h],
// down [h, I]), run as five steps, as engines run them unfused:
//   permute  X's rows gathered into expert order: X read once (a*T*h), the
//            gather map (int32 per routed row, 4*T*k) read, a*T*k*h written;
//   gate_up  grouped GEMM (grouped_linear_cost, N = 2I, K = h);
//   act      SiLU(gate) * up (gated_activation_cost over T*k rows);
//   down     grouped GEMM (N = h, K = I);
//   combine  each token's k rows read (a*T*k*h), with its k positions (int32)
//            and the router's combine weights (fp32), its row written (a*T*h).
// FLOPs count the routed tokens (2*T*k*3*h*I); weight bytes the experts touched
// (`touched`: drawn, or expected_experts_touched); the routing's indices and
// weights (the router's output, 12*T*k bytes) are index (block_table) and
// activation reads.
struct MoeShape {
  std::uint64_t T = 0, k = 0, E = 0, h = 0, I = 0;
  static MoeShape of(const Shape& s) { return {s["T"], s["k"], s["E"], s["h"], s["I"]}; }
  Shape shape() const { return {{"T", T}, {"k", k}, {"E", E}, {"h", h}, {"I", I}}; }
};
struct MoeCost {
  OpCost permute, gate_up, act, down, combine;
  OpCost total() const;
};
MoeCost moe_cost(const MoeShape& s, double touched, const WeightFormat& w_gate_up, const WeightFormat& w_down,
                 std::uint64_t a);

// The smallest batch M at which the linear layer N x K of element type `t` (its
// output in linear_output_type(t)) reaches intensity `ridge` FLOP/byte: where it
// crosses from memory-bound to compute-bound on a roofline of that ridge.
// Nothing when not before M = 2^24.
std::optional<std::uint64_t> linear_batch_at_intensity(std::uint64_t N, std::uint64_t K, DType t, double ridge);
// The smallest batch in 1..2^24 for which `reaches` holds, for a predicate that
// stays true once true (bisection); nothing when none does.
std::optional<std::uint64_t> first_batch_where(const std::function<bool(std::uint64_t)>& reaches);

// One query token per sequence attending to L cached tokens. K and V caches are
// [B, Hkv, L, D]; queries and outputs [B, Hq, D].
struct AttentionShape {
  std::uint64_t B = 0, Hq = 0, Hkv = 0, L = 0, D = 0;
  static AttentionShape of(const Shape& s) { return {s["B"], s["Hq"], s["Hkv"], s["L"], s["D"]}; }
  Shape shape() const { return {{"B", B}, {"Hq", Hq}, {"Hkv", Hkv}, {"L", L}, {"D", D}}; }
};
// The queries of a decode step: S new tokens per sequence (speculative
// verification: causal within them) over per-sequence contexts `lengths` (a
// ragged batch; each includes the step's S tokens and is at least S; empty: all
// L). Query s of sequence b attends to its first L_b - S + 1 + s tokens.
struct DecodeQueries {
  std::uint64_t S = 1;
  std::vector<std::uint64_t> lengths;
};
// c: KV-cache element bytes (1: fp8 e4m3, with kv_scale_bytes of scales), a:
// query and output element bytes. FLOPs 4*Hq*D*sum_b (S*L_b - S(S-1)/2); the
// cache is read once per sequence, c*2*Hkv*D*sum_b L_b; a*B*S*Hq*D of queries
// read and of outputs written.
OpCost decode_attention_cost(const AttentionShape& s, std::uint64_t c, std::uint64_t a, const DecodeQueries& q = {});
// An 8-bit KV cache is stored with one fp32 scale per KV head for K and one for V
// (value = e4m3 x scale); 16-bit caches have none.
std::uint64_t kv_scale_bytes(std::uint64_t Hkv, std::uint64_t c);
// Paged cache: the same KV bytes plus each sequence's block table (int32 per page).
std::uint64_t pages_per_sequence(std::uint64_t L, std::uint64_t page_size);
OpCost decode_attention_paged_cost(const AttentionShape& s, std::uint64_t c, std::uint64_t a, std::uint64_t page_size,
                                   const DecodeQueries& q = {});

// Causal self-attention over S prompt tokens with no cached prefix (L ignored).
struct PrefillAttentionShape {
  std::uint64_t B = 0, Hq = 0, Hkv = 0, S = 0, D = 0;
  static PrefillAttentionShape of(const Shape& s) { return {s["B"], s["Hq"], s["Hkv"], s["S"], s["D"]}; }
  Shape shape() const { return {{"B", B}, {"Hq", Hq}, {"Hkv", Hkv}, {"S", S}, {"D", D}}; }
};
// `window` > 0: sliding-window attention, each query sees at most `window` keys
// (itself and the window - 1 before it).
// `v_dim` > 0: values of another width than queries and keys (DeepSeek's expanded
// MLA prefill: q/k dim D = nope + rope, v dim v_head_dim).
// `chunk` > 0: chunked local attention (Llama 4), queries see only the earlier
// tokens of their own chunk.
OpCost prefill_attention_cost(const PrefillAttentionShape& s, std::uint64_t a, std::uint64_t window = 0,
                              std::uint64_t v_dim = 0, std::uint64_t chunk = 0);
// Query-key pairs of causal attention over S tokens with a window (0: none):
// S(S+1)/2 without, W(W+1)/2 + (S-W)W when S > W.
std::uint64_t causal_pairs(std::uint64_t S, std::uint64_t window);
// The same within chunks of C tokens: floor(S/C) * C(C+1)/2 + r(r+1)/2, r = S mod C.
std::uint64_t chunked_causal_pairs(std::uint64_t S, std::uint64_t chunk);

// Multi-head latent attention (DeepSeek-V2/V3): the cache keeps one latent per
// token and layer, R = kv_lora_rank compressed K/V plus P = qk_rope_head_dim of
// rope key shared by all heads. Decode runs in the absorbed form (FlashMLA, vLLM
// and SGLang decode): each of the H queries is moved into the latent space first
// (its nope part times W_UK), so every head attends over the same latents of
// width R + P and takes values from their first R: 2*B*H*L*(R+P) FLOPs for the
// scores and 2*B*H*L*R for the values; the cache is read once for all heads.
struct LatentAttentionShape {
  std::uint64_t B = 0, H = 0, L = 0, R = 0, P = 0;
  static LatentAttentionShape of(const Shape& s) { return {s["B"], s["H"], s["L"], s["R"], s["P"]}; }
  Shape shape() const { return {{"B", B}, {"H", H}, {"L", L}, {"R", R}, {"P", P}}; }
};
OpCost latent_attention_cost(const LatentAttentionShape& s, std::uint64_t c, std::uint64_t a);
// Paged latent cache: the same bytes plus each sequence's int32 block table (4 bytes
// per page per sequence), as decode_attention_paged_cost.
OpCost latent_attention_paged_cost(const LatentAttentionShape& s, std::uint64_t c, std::uint64_t a,
                                          std::uint64_t page_size);
// Writing `tokens` new latents of `width` (R + P) elements into the cache.
OpCost latent_append_cost(std::uint64_t tokens, std::uint64_t width, std::uint64_t a, std::uint64_t c);
// `groups` independent M x N x K products, each with its own N x K weight (the
// per-head W_UK and W_UV of absorbed MLA): 2*G*M*N*K FLOPs, the weights
// (`weight_bytes` for all groups) read once.
OpCost batched_linear_cost(std::uint64_t groups, const LinearShape& s, std::uint64_t weight_bytes, std::uint64_t a_in,
                           std::uint64_t a_out);

// Writing S new tokens' K and V per sequence into the cache.
struct KvAppendShape {
  std::uint64_t B = 0, S = 0, Hkv = 0, D = 0;
  static KvAppendShape of(const Shape& s) { return {s["B"], s["S"], s["Hkv"], s["D"]}; }
  Shape shape() const { return {{"B", B}, {"S", S}, {"Hkv", Hkv}, {"D", D}}; }
};
OpCost kv_append_cost(const KvAppendShape& s, std::uint64_t a, std::uint64_t c);
// Paged: plus one int32 block-table read per appended token.
OpCost kv_append_paged_cost(const KvAppendShape& s, std::uint64_t a, std::uint64_t c);

// Elementwise op: reads `read_bytes` of activations and `weight_bytes` of
// parameters (a norm's scale), writes `write_bytes`; 0 FLOPs by convention.
OpCost elementwise_cost(std::uint64_t read_bytes, std::uint64_t weight_bytes, std::uint64_t write_bytes);
// The elementwise ops of a transformer layer, over M tokens.
OpCost rmsnorm_cost(std::uint64_t M, std::uint64_t h, std::uint64_t a, std::uint64_t w);
OpCost rope_cost(std::uint64_t M, std::uint64_t Hq, std::uint64_t Hkv, std::uint64_t D, std::uint64_t a);
OpCost gated_activation_cost(std::uint64_t M, std::uint64_t I, std::uint64_t a);  // act(gate) * up

// Bytes each of n GPUs sends in a ring all-reduce of `payload` bytes (reduce-
// scatter then all-gather): 2 (n-1)/n * payload; an all-gather of `total` bytes
// (each GPU holding total/n): (n-1)/n * total.
std::uint64_t all_reduce_link_bytes(std::uint64_t payload, std::uint64_t n);
std::uint64_t all_gather_link_bytes(std::uint64_t total, std::uint64_t n);

// KV cache size = 2 * layers * Hkv * D * context * batch * c bytes.
std::uint64_t kv_cache_bytes(std::uint64_t layers, std::uint64_t Hkv, std::uint64_t D, std::uint64_t context,
                             std::uint64_t batch, std::uint64_t c);

}  // namespace phasebench
