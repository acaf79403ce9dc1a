#include "backend.hpp"

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

OpCost OpRequest::cost() const {
  const auto e = element_bytes(dtype);
  switch (kind) {
    case OpKind::linear: return linear_cost(linear, e, e);
    case OpKind::decode_attention: return decode_attention_cost(attention, e, e);
    case OpKind::decode_attention_paged: return decode_attention_paged_cost(attention, e, e, page_size);
    case OpKind::prefill_attention: return prefill_attention_cost(prefill, e);
    case OpKind::kv_append: return kv_append_cost(append, e, e);
    case OpKind::kv_append_paged: return kv_append_paged_cost(append, e, e);
    case OpKind::elementwise: break;
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
