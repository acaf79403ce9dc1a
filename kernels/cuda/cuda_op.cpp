// The CUDA backend's table of operations (cuda_op.hpp): lookup, the one check
// of whether a request can run (limits, 32-bit indexing, memory), and make_op.
#include "cuda/cuda_op.hpp"

#include <climits>
#include <cstdio>
#include <exception>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cuda {

const CudaOps& all_ops() {
  static const CudaOps ops = [] {
    CudaOps o;
    register_all_ops(o);
    return o;
  }();
  return ops;
}

namespace {

std::string gib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / double(1ull << 30));
  return buf;
}

}  // namespace

std::optional<std::string> cannot_run(const Context& ctx, const OpRequest& r, std::uint64_t reserve_bytes) {
  const auto* impl = all_ops().find(r.kind, r.impl);
  if (!impl) return "the CUDA backend has no " + std::string(to_string(r.impl)) + " implementation of " + r.kind;
  // The kernels index with 32-bit ints (cuBLASLt's leading dimensions too).
  for (const auto& [dim, v] : r.shape.dims())
    if (v > static_cast<std::uint64_t>(INT_MAX))
      return r.kind + ": " + dim + " = " + std::to_string(v) + " exceeds the CUDA kernels' 32-bit indexing";
  if (impl->unsupported)
    if (auto why = impl->unsupported(r, ctx)) return why;  // also says why a dtype is not taken, where it can
  if (!impl->dtypes(r.dtype, ctx))
    return "the CUDA backend's " + std::string(to_string(r.impl)) + " " + r.kind + " does not take " +
           std::string(to_string(r.dtype)) + " on this device";
  std::uint64_t need = 0, scratch = 0;
  try {
    scratch = impl->scratch_bytes ? impl->scratch_bytes(r, ctx) : 0;
    need = add(add(r.footprint_bytes(), scratch), reserve_bytes, "device memory");
  } catch (const std::exception& e) {
    return std::string("size: ") + e.what();
  }
  const std::uint64_t free_b = ctx.free_bytes();
  if (static_cast<double>(need) > 0.9 * static_cast<double>(free_b))
    return r.kind + " needs " + gib(need) + " GiB of device memory" +
           (scratch ? " (" + gib(scratch) + " GiB of it scratch)" : std::string()) + ", more than 90% of the " +
           gib(free_b) + " GiB free";
  return std::nullopt;
}

std::unique_ptr<PreparedOp> make_op(Context& ctx, const OpRequest& r) {
  if (auto why = cannot_run(ctx, r)) throw Unsupported(*why);
  return all_ops().find(r.kind, r.impl)->prepare(ctx, r);
}

}  // namespace phasebench::cuda
