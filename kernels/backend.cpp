#include "backend.hpp"

#include <initializer_list>
#include <stdexcept>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"

namespace phasebench {

std::vector<float> PreparedOp::output_values() {
  throw std::logic_error("this operation does not expose its output");
}

std::string_view to_string(Impl i) { return i == Impl::own ? "own" : "blas"; }

Impl parse_impl(std::string_view s) {
  if (s == "own") return Impl::own;
  if (s == "blas" || s == "cublas" || s == "cublaslt" || s == "openblas") return Impl::blas;
  throw InputError("unknown implementation '" + std::string(s) + "'; use own or blas");
}

LayerDims LayerDims::of(const ModelConfig& m) {
  LayerDims d;
  d.hidden = m.hidden;
  d.intermediate = m.intermediate;
  d.heads = m.heads;
  d.kv_heads = m.kv_heads;
  d.head_dim = m.head_dim;
  d.norms_per_layer = m.norms_per_layer;
  return d;
}

ModelConfig layer_model(const OpRequest& r) {
  ModelConfig m;
  m.name = "layer";
  m.hidden = r.layer.hidden;
  m.intermediate = r.layer.intermediate;
  m.layers = 1;
  m.heads = r.layer.heads;
  m.kv_heads = r.layer.kv_heads;
  m.head_dim = r.layer.head_dim;
  m.norms_per_layer = r.layer.norms_per_layer;
  return m;
}

StepShape layer_step(const OpRequest& r) {
  if (r.layer_phase == Phase::prefill) return {Phase::prefill, r.prefill.B, r.prefill.S, 0};
  return {Phase::decode, r.attention.B, 1, r.attention.L};
}

std::vector<LayerOp> layer_request_ops(const OpRequest& r) {
  return layer_ops(layer_model(r), layer_step(r), Precision::from(r.dtype, r.dtype));
}

namespace {

std::uint64_t add_all(std::initializer_list<std::uint64_t> xs, const char* what) {
  std::uint64_t r = 0;
  for (auto x : xs) r = add(r, x, what);
  return r;
}

// Every buffer a layer request allocates: weights, the activations between the
// ops (one buffer each, none reused), the contiguous KV cache and the positions.
std::uint64_t layer_footprint(const OpRequest& r) {
  const auto e = element_bytes(r.dtype);
  const auto& d = r.layer;
  const auto st = layer_step(r);
  const auto M = mul(st.batch, st.new_tokens, "tokens");
  const auto h = d.hidden, I = d.intermediate;
  const auto Nq = mul(d.heads, d.head_dim), Nkv = mul(d.kv_heads, d.head_dim);
  const auto Nqkv = add(Nq, mul(2, Nkv));
  const auto cap = st.phase == Phase::prefill ? st.new_tokens : st.context;
  std::uint64_t weights = add(mul(h, Nqkv), mul(Nq, h));
  weights = add(weights, mul({3, I, h}, "layer weights"));
  weights = add(weights, mul(2, h));
  // x, attn-normed x, qkv, q, k, v, attention out, o, mlp-normed, gate_up, act, out
  const std::uint64_t per_token = add_all({h, h, Nqkv, Nq, mul(2, Nkv), Nq, h, h, mul(2, I), I, h}, "layer activations");
  const auto acts = mul(M, per_token, "layer activations");
  const auto cache = mul({2, st.batch, d.kv_heads, cap, d.head_dim}, "layer KV cache");
  return add(mul(e, add_all({weights, acts, cache}, "layer bytes"), "layer bytes"), mul(4, M));
}

}  // namespace

OpCost OpRequest::cost() const {
  const auto e = element_bytes(dtype);
  switch (kind) {
    case OpKind::linear: return linear_cost(linear, e, e, element_bytes(linear_output_type(dtype)));
    case OpKind::decode_attention: return decode_attention_cost(attention, e, e);
    case OpKind::decode_attention_paged: return decode_attention_paged_cost(attention, e, e, page_size);
    case OpKind::prefill_attention: return prefill_attention_cost(prefill, e);
    case OpKind::kv_append: return kv_append_cost(append, e, e);
    case OpKind::kv_append_paged: return kv_append_paged_cost(append, e, e);
    case OpKind::elementwise: break;
    case OpKind::layer: {
      OpCost c;
      for (const auto& op : layer_request_ops(*this)) c += op.cost;
      return c;
    }
  }
  throw InputError("no benchmark for elementwise requests");
}

std::uint64_t OpRequest::footprint_bytes() const {
  const auto e = element_bytes(dtype);
  switch (kind) {
    case OpKind::linear: return cost().bytes.total();
    case OpKind::decode_attention: return cost().bytes.total();
    case OpKind::decode_attention_paged: {
      const auto pages = mul(attention.B, pages_per_sequence(attention.L, page_size), "pages");
      return add(mul({e, 2, pages, attention.Hkv, page_size, attention.D}, "paged KV bytes"),
                 add(cost().bytes.activations + cost().bytes.writes, mul(4, pages)));
    }
    case OpKind::prefill_attention: return cost().bytes.total();
    case OpKind::kv_append:
    case OpKind::kv_append_paged: {
      const auto cap = pages_per_sequence(append_capacity, page_size) * page_size;
      return add(mul({e, 2, append.B, append.Hkv, cap, append.D}, "KV-cache bytes"), cost().bytes.total());
    }
    case OpKind::layer: return layer_footprint(*this);
    case OpKind::elementwise: break;
  }
  return 0;
}

std::unique_ptr<Backend> make_backend(const std::string& which, std::string* why) {
  std::string reason;
  if (which == "cpu") {
    if (why) *why = "backend cpu: chosen with --backend=cpu";
    return make_cpu_backend();
  }
  if (which == "cuda") {
    if (!cuda_backend_built())
      throw InputError("--backend=cuda: this build has no CUDA backend (no CUDA compiler was found at configure time)");
    auto b = make_cuda_backend(&reason);
    if (!b) throw InputError("--backend=cuda: " + reason);
    if (why) *why = "backend cuda: chosen with --backend=cuda; " + reason;
    return b;
  }
  if (which == "auto") {
    if (cuda_backend_built()) {
      if (auto b = make_cuda_backend(&reason)) {
        if (why) *why = "backend cuda (auto): " + reason;
        return b;
      }
      if (why) *why = "backend cpu (auto): " + reason;
    } else if (why) {
      *why = "backend cpu (auto): this build has no CUDA backend";
    }
    return make_cpu_backend();
  }
  throw InputError("unknown backend '" + which + "'; use auto, cuda or cpu");
}

}  // namespace phasebench
