// FLOPs and minimum bytes of each operation's shape (workload.hpp): the one place
// costs are computed, for the benchmarks, the analytical model and the tests.
#include "phasebench/workload.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

#include "phasebench/checked.hpp"

namespace phasebench {

std::uint64_t Bytes::reads() const {
  return add(add(add(weights, kv_cache, "bytes"), activations, "bytes"), block_table, "bytes");
}
std::uint64_t Bytes::total() const { return add(reads(), writes, "bytes"); }

Bytes& Bytes::operator+=(const Bytes& o) {
  weights = add(weights, o.weights, "bytes");
  kv_cache = add(kv_cache, o.kv_cache, "bytes");
  activations = add(activations, o.activations, "bytes");
  block_table = add(block_table, o.block_table, "bytes");
  writes = add(writes, o.writes, "bytes");
  return *this;
}

Bytes Bytes::scaled(std::uint64_t n) const {
  Bytes b;
  b.weights = mul(weights, n, "bytes");
  b.kv_cache = mul(kv_cache, n, "bytes");
  b.activations = mul(activations, n, "bytes");
  b.block_table = mul(block_table, n, "bytes");
  b.writes = mul(writes, n, "bytes");
  return b;
}

double OpCost::intensity() const {
  const auto t = bytes.total();
  return t == 0 ? 0.0 : static_cast<double>(flops) / static_cast<double>(t);
}

OpCost& OpCost::operator+=(const OpCost& o) {
  flops = add(flops, o.flops, "FLOPs");
  bytes += o.bytes;
  return *this;
}

OpCost OpCost::scaled(std::uint64_t n) const {
  OpCost c;
  c.flops = mul(flops, n, "FLOPs");
  c.bytes = bytes.scaled(n);
  return c;
}

OpCost linear_cost(const LinearShape& s, std::uint64_t w, std::uint64_t a_in, std::uint64_t a_out) {
  OpCost c;
  c.flops = mul({2, s.M, s.N, s.K}, "linear FLOPs");
  c.bytes.weights = mul({w, s.N, s.K}, "linear weight bytes");
  c.bytes.activations = mul({a_in, s.M, s.K}, "linear input bytes");
  c.bytes.writes = mul({a_out, s.M, s.N}, "linear output bytes");
  return c;
}

OpCost linear_cost(const LinearShape& s, const WeightFormat& w, std::uint64_t a_in, std::uint64_t a_out) {
  OpCost c = linear_cost(s, 0, a_in, a_out);
  c.bytes.weights = w.bytes(s.N, s.K);
  return c;
}

OpCost block_scaled_linear_cost(const LinearShape& s, DType t) {
  if (!block_scaling(t))
    throw std::logic_error("block_scaled_linear_cost: " + std::string(to_string(t)) + " is not a block-scaled type");
  OpCost c = linear_cost(s, 0, 0, element_bytes(linear_output_type(t)));
  c.bytes.weights = matrix_bytes(t, s.N, s.K);
  c.bytes.activations = matrix_bytes(t, s.M, s.K);
  return c;
}

OpCost grouped_linear_cost(std::uint64_t tokens, std::uint64_t k, std::uint64_t N, std::uint64_t K, double touched,
                           const WeightFormat& w, std::uint64_t a_in, std::uint64_t a_out) {
  const auto rows = mul(tokens, k, "routed tokens");
  OpCost c = linear_cost({rows, N, K}, 0, a_in, a_out);
  c.bytes.weights = static_cast<std::uint64_t>(std::llround(touched * static_cast<double>(w.bytes(N, K))));
  return c;
}

OpCost MoeCost::total() const {
  OpCost t = permute;
  t += gate_up;
  t += act;
  t += down;
  t += combine;
  return t;
}

MoeCost moe_cost(const MoeShape& s, double touched, const WeightFormat& w_gate_up, const WeightFormat& w_down,
                 std::uint64_t a) {
  MoeCost c;
  const auto rows = mul(s.T, s.k, "routed tokens");
  c.permute.bytes.activations = mul({a, s.T, s.h}, "MoE input bytes");
  c.permute.bytes.block_table = mul(4, rows, "MoE gather map bytes");
  c.permute.bytes.writes = mul({a, rows, s.h}, "MoE permuted input bytes");
  c.gate_up = grouped_linear_cost(s.T, s.k, mul(2, s.I, "MoE gate_up rows"), s.h, touched, w_gate_up, a, a);
  c.act = gated_activation_cost(rows, s.I, a);
  c.down = grouped_linear_cost(s.T, s.k, s.h, s.I, touched, w_down, a, a);
  c.combine.bytes.activations = add(mul({a, rows, s.h}, "MoE expert output bytes"), mul(4, rows, "MoE combine weight bytes"));
  c.combine.bytes.block_table = mul(4, rows, "MoE combine map bytes");
  c.combine.bytes.writes = mul({a, s.T, s.h}, "MoE output bytes");
  return c;
}

std::optional<std::uint64_t> first_batch_where(const std::function<bool(std::uint64_t)>& reaches) {
  constexpr std::uint64_t kLimit = 1ull << 24;
  std::uint64_t hi = 1;
  while (!reaches(hi)) {
    if (hi >= kLimit) return std::nullopt;
    hi *= 2;
  }
  if (hi == 1) return 1;
  std::uint64_t lo = hi / 2;  // does not reach
  while (hi - lo > 1) {
    const auto mid = lo + (hi - lo) / 2;
    (reaches(mid) ? hi : lo) = mid;
  }
  return hi;
}

std::optional<std::uint64_t> linear_batch_at_intensity(std::uint64_t N, std::uint64_t K, DType t, double ridge) {
  const auto e = element_bytes(t), out = element_bytes(linear_output_type(t));
  // Intensity grows with M (toward 2NK / (a_in K + a_out N)).
  return first_batch_where([&](std::uint64_t M) { return linear_cost({M, N, K}, e, e, out).intensity() >= ridge; });
}

OpCost decode_attention_cost(const AttentionShape& s, std::uint64_t c, std::uint64_t a, const DecodeQueries& q) {
  if (!q.lengths.empty() && q.lengths.size() != s.B)
    throw std::logic_error("decode attention cost: " + std::to_string(q.lengths.size()) + " lengths for batch " +
                           std::to_string(s.B));
  const std::uint64_t S = std::max<std::uint64_t>(q.S, 1);
  // Sum of the contexts, and of the keys the queries see: S*L_b - S(S-1)/2 per sequence.
  std::uint64_t tokens = 0, pairs = 0;
  for (std::uint64_t b = 0; b < s.B; ++b) {
    const std::uint64_t L = q.lengths.empty() ? s.L : q.lengths[b];
    if (L < S) throw InputError("decode attention: a context of " + std::to_string(L) + " tokens cannot hold " +
                                std::to_string(S) + " new tokens");
    tokens = add(tokens, L, "KV tokens");
    pairs = add(pairs, mul(S, L, "attention pairs") - S * (S - 1) / 2, "attention pairs");
  }
  OpCost r;
  r.flops = mul({4, s.Hq, pairs, s.D}, "decode attention FLOPs");
  r.bytes.kv_cache = add(mul({c, 2, s.Hkv, tokens, s.D}, "KV-cache bytes"), kv_scale_bytes(s.Hkv, c), "KV-cache bytes");
  // Queries read and outputs written: a*B*S*Hq*D each.
  r.bytes.activations = mul({a, s.B, S, s.Hq, s.D}, "query bytes");
  r.bytes.writes = mul({a, s.B, S, s.Hq, s.D}, "attention output bytes");
  return r;
}

std::uint64_t kv_scale_bytes(std::uint64_t Hkv, std::uint64_t c) { return c == 1 ? mul({2, Hkv, 4}, "KV scale bytes") : 0; }

std::uint64_t pages_per_sequence(std::uint64_t L, std::uint64_t page_size) {
  if (page_size == 0) throw InputError("page size must be a positive integer");
  return L / page_size + (L % page_size != 0 ? 1 : 0);
}

OpCost decode_attention_paged_cost(const AttentionShape& s, std::uint64_t c, std::uint64_t a, std::uint64_t page_size,
                                   const DecodeQueries& q) {
  OpCost r = decode_attention_cost(s, c, a, q);
  std::uint64_t pages = 0;
  for (std::uint64_t b = 0; b < s.B; ++b)
    pages = add(pages, pages_per_sequence(q.lengths.empty() ? s.L : q.lengths[b], page_size), "pages");
  r.bytes.block_table = mul(4, pages, "block-table bytes");
  return r;
}

std::uint64_t causal_pairs(std::uint64_t S, std::uint64_t window) {
  if (window == 0 || S <= window) return mul(S, S + 1, "attention pairs") / 2;
  return add(mul(window, window + 1, "attention pairs") / 2, mul(S - window, window, "attention pairs"));
}

std::uint64_t chunked_causal_pairs(std::uint64_t S, std::uint64_t chunk) {
  if (chunk == 0) return causal_pairs(S, 0);
  const auto r = S % chunk;
  return add(mul(S / chunk, causal_pairs(chunk, 0), "attention pairs"), causal_pairs(r, 0), "attention pairs");
}

OpCost prefill_attention_cost(const PrefillAttentionShape& s, std::uint64_t a, std::uint64_t window,
                              std::uint64_t v_dim, std::uint64_t chunk) {
  const auto Dv = v_dim ? v_dim : s.D;
  OpCost r;
  // Causal: query i attends to i+1 keys (at most `window`); QK^T is 2 FLOPs per
  // (query, key, d) over D and PV over Dv: 2*B*Hq*(D + Dv) * pairs, which is
  // 2*B*Hq*D*S*(S+1) when Dv = D and there is no window.
  const auto pairs = chunk ? chunked_causal_pairs(s.S, chunk) : causal_pairs(s.S, window);
  r.flops = mul({2, s.B, s.Hq, s.D + Dv, pairs}, "prefill attention FLOPs");
  r.bytes.activations = mul({a, s.B, s.S, add(mul(s.D, s.Hq + s.Hkv), mul(Dv, s.Hkv))}, "prefill attention input bytes");
  r.bytes.writes = mul({a, s.B, s.S, Dv, s.Hq}, "prefill attention output bytes");
  return r;
}

OpCost latent_attention_cost(const LatentAttentionShape& s, std::uint64_t c, std::uint64_t a) {
  OpCost r;
  r.flops = mul({2, s.B, s.H, s.L, add(mul(2, s.R), s.P)}, "latent attention FLOPs");
  r.bytes.kv_cache = mul({c, s.B, s.L, s.R + s.P}, "latent cache bytes");
  r.bytes.activations = mul({a, s.B, s.H, s.R + s.P}, "latent query bytes");
  r.bytes.writes = mul({a, s.B, s.H, s.R}, "latent attention output bytes");
  return r;
}

OpCost latent_attention_paged_cost(const LatentAttentionShape& s, std::uint64_t c, std::uint64_t a,
                                          std::uint64_t page_size) {
  OpCost r = latent_attention_cost(s, c, a);
  r.bytes.block_table = mul({4, s.B, pages_per_sequence(s.L, page_size)}, "block-table bytes");
  return r;
}

OpCost latent_append_cost(std::uint64_t tokens, std::uint64_t width, std::uint64_t a, std::uint64_t c) {
  OpCost r;
  r.bytes.activations = mul({a, tokens, width}, "latent append read bytes");
  r.bytes.writes = mul({c, tokens, width}, "latent append write bytes");
  return r;
}

OpCost batched_linear_cost(std::uint64_t groups, const LinearShape& s, std::uint64_t weight_bytes, std::uint64_t a_in,
                           std::uint64_t a_out) {
  OpCost r = linear_cost(s, 0, a_in, a_out).scaled(groups);
  r.bytes.weights = weight_bytes;
  return r;
}

OpCost kv_append_cost(const KvAppendShape& s, std::uint64_t a, std::uint64_t c) {
  OpCost r;
  r.bytes.activations = mul({a, 2, s.B, s.S, s.Hkv, s.D}, "KV append read bytes");
  r.bytes.writes = mul({c, 2, s.B, s.S, s.Hkv, s.D}, "KV append write bytes");
  return r;
}

OpCost kv_append_paged_cost(const KvAppendShape& s, std::uint64_t a, std::uint64_t c) {
  OpCost r = kv_append_cost(s, a, c);
  r.bytes.block_table = mul({4, s.B, s.S}, "block-table bytes");
  return r;
}

OpCost elementwise_cost(std::uint64_t read_bytes, std::uint64_t weight_bytes, std::uint64_t write_bytes) {
  OpCost r;
  r.bytes.activations = read_bytes;
  r.bytes.weights = weight_bytes;
  r.bytes.writes = write_bytes;
  return r;
}

OpCost rmsnorm_cost(std::uint64_t M, std::uint64_t h, std::uint64_t a, std::uint64_t w) {
  const auto act = mul({a, M, h}, "norm bytes");
  return elementwise_cost(act, mul(w, h, "norm bytes"), act);
}

OpCost rope_cost(std::uint64_t M, std::uint64_t Hq, std::uint64_t Hkv, std::uint64_t D, std::uint64_t a) {
  // Rotates q and k in place; cos/sin are computed on the fly (no table traffic).
  const auto b = mul({a, M, Hq + Hkv, D}, "RoPE bytes");
  return elementwise_cost(b, 0, b);
}

OpCost gated_activation_cost(std::uint64_t M, std::uint64_t I, std::uint64_t a) {
  return elementwise_cost(mul({a, M, 2, I}, "activation bytes"), 0, mul({a, M, I}, "activation bytes"));
}

std::uint64_t kv_cache_bytes(std::uint64_t layers, std::uint64_t Hkv, std::uint64_t D, std::uint64_t context,
                             std::uint64_t batch, std::uint64_t c) {
  return mul({2, layers, Hkv, D, context, batch, c}, "KV-cache size");
}

std::uint64_t all_reduce_link_bytes(std::uint64_t payload, std::uint64_t n) {
  return n <= 1 ? 0 : mul({2, n - 1, payload}, "all-reduce bytes") / n;
}

std::uint64_t all_gather_link_bytes(std::uint64_t total, std::uint64_t n) {
  return n <= 1 ? 0 : mul(n - 1, total, "all-gather bytes") / n;
}

}  // namespace phasebench
