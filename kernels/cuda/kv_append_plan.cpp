// KV append's host plan (kv_append_plan.hpp): the kernel's limits and a request's plan.
#include "cuda/kv_append_plan.hpp"

#include <climits>

#include "phasebench/ops/kv_append.hpp"

namespace phasebench::cuda {

std::optional<std::string> kv_append_unsupported(DType dtype, long long D, bool paged, long long page_size) {
  if (element_bytes(dtype) != 2)
    return "KV append: dtype " + std::string(to_string(dtype)) + " is not supported on CUDA; use bf16 or fp16";
  if (D <= 0 || D % 8 != 0)
    return "KV append: head_dim " + std::to_string(D) + " is not supported; use a multiple of 8 (16-byte vectors)";
  if (paged && (page_size < 16 || page_size % 16 != 0))
    return "KV append: page size " + std::to_string(page_size) + " is not supported; use a multiple of 16";
  return std::nullopt;
}

namespace {

std::optional<std::string> request_unsupported(const OpRequest& r, const Context&) {
  const auto a = KvAppendShape::of(r.shape);
  const bool paged = r.kind == kKvAppendPaged;
  const auto& o = r.options.as<KvAppendOptions>();
  const std::uint64_t P = paged ? o.page_size : 0, cap = o.capacity;
  if (auto why = kv_append_unsupported(r.dtype, static_cast<long long>(a.D), paged, static_cast<long long>(P)))
    return why;
  if (a.B == 0 || a.S == 0 || a.Hkv == 0) return std::string("KV append: batch, tokens and kv heads must be >= 1");
  if (cap < a.S)
    return "KV append: capacity " + std::to_string(cap) + " is smaller than the " + std::to_string(a.S) +
           " tokens appended";
  if (cap > static_cast<std::uint64_t>(INT_MAX)) return std::string("KV append: capacity exceeds 2^31 - 1");
  if (a.B * a.S * a.Hkv * (a.D / 8) >= (1ull << 31))
    return std::string("KV append: more than 2^31 16-byte vectors per call (the kernel's limit)");
  if (paged && a.B * pages_per_sequence(cap, P) > static_cast<std::uint64_t>(INT_MAX))
    return std::string("KV append (paged): more than 2^31 pages");
  return std::nullopt;
}

}  // namespace

std::shared_ptr<const KvAppendPlan> plan_kv_append(const OpRequest& r, const Context& ctx) {
  return make_plan<KvAppendPlan>(request_unsupported(r, ctx), [&](KvAppendPlan& plan) {
    const auto a = KvAppendShape::of(r.shape);
    plan.paged = r.kind == kKvAppendPaged;
    const auto& o = r.options.as<KvAppendOptions>();
    // Every dimension fits in int: the check's 32-bit indexing and the limits above.
    const int S = static_cast<int>(a.S), cap = static_cast<int>(o.capacity);
    const int page_size = plan.paged ? static_cast<int>(o.page_size) : 0;
    const int pages_per_seq =
        plan.paged ? static_cast<int>(pages_per_sequence(o.capacity, o.page_size)) : 0;
    plan.params = kv_append_params(r.dtype, nullptr, nullptr, nullptr, nullptr, static_cast<int>(a.B), S,
                                   static_cast<int>(a.Hkv), static_cast<int>(a.D), cap, cap - S, nullptr, page_size,
                                   pages_per_seq);
  });
}

}  // namespace phasebench::cuda
