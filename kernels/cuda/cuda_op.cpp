// The CUDA backend's table of operations (cuda_op.hpp): lookup, the one check
// of whether a request can run (limits, 32-bit indexing, memory) with the
// request's plan, and make_op from that plan.
#include "cuda/cuda_op.hpp"

#include <atomic>
#include <climits>
#include <cstdio>
#include <exception>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cuda {

namespace {

std::atomic<std::uint64_t> g_plans_made{0};

std::string gib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / double(1ull << 30));
  return buf;
}

}  // namespace

OpPlan::OpPlan() { ++g_plans_made; }

std::uint64_t plans_made() { return g_plans_made.load(); }

std::function<std::shared_ptr<const OpPlan>(const OpRequest&, const Context&)> limits_plan(UnsupportedFn unsupported,
                                                                                          ScratchFn scratch) {
  return [unsupported = std::move(unsupported), scratch = std::move(scratch)](const OpRequest& r, const Context& ctx) {
    auto plan = std::make_shared<OpPlan>();
    if (unsupported) plan->unsupported = unsupported(r, ctx);
    if (!plan->unsupported && scratch) {
      try {
        plan->scratch_bytes = scratch(r, ctx);
      } catch (const std::exception& e) {
        plan->unsupported = std::string("size: ") + e.what();
      }
    }
    return std::shared_ptr<const OpPlan>(std::move(plan));
  };
}

std::map<std::string, std::string>& library_versions() {
  static std::map<std::string, std::string> versions;
  return versions;
}

const CudaOps& all_ops() {
  static const CudaOps ops = [] {
    CudaOps o;
    register_all_ops(o);
    return o;
  }();
  return ops;
}

CheckedRequest check_request(const Context& ctx, const OpRequest& r, std::uint64_t reserve_bytes) {
  CheckedRequest c;
  const auto* impl = all_ops().find(r.kind, r.impl);
  if (!impl) {
    c.why = "the CUDA backend has no " + std::string(to_string(r.impl)) + " implementation of " + r.kind;
    return c;
  }
  // The kernels index with 32-bit ints (cuBLASLt's leading dimensions too).
  for (const auto& [dim, v] : r.shape.dims())
    if (v > static_cast<std::uint64_t>(INT_MAX)) {
      c.why = r.kind + ": " + dim + " = " + std::to_string(v) + " exceeds the CUDA kernels' 32-bit indexing";
      return c;
    }
  c.impl = impl;
  c.plan = impl->plan(r, ctx);
  if (!c.plan) throw std::logic_error("the CUDA " + r.kind + " planner made no plan");
  if (c.plan->unsupported) {  // also says why a dtype is not taken, where it can
    c.why = c.plan->unsupported;
    return c;
  }
  if (!impl->dtypes(r.dtype, ctx)) {
    c.why = "the CUDA backend's " + std::string(to_string(r.impl)) + " " + r.kind + " does not take " +
            std::string(to_string(r.dtype)) + " on this device";
    return c;
  }
  const std::uint64_t scratch = c.plan->scratch_bytes;
  std::uint64_t need = 0;
  try {
    need = add(add(r.footprint_bytes(), scratch), reserve_bytes, "device memory");
  } catch (const std::exception& e) {
    c.why = std::string("size: ") + e.what();
    return c;
  }
  const std::uint64_t free_b = ctx.free_bytes();
  if (static_cast<double>(need) > 0.9 * static_cast<double>(free_b))
    c.why = r.kind + " needs " + gib(need) + " GiB of device memory" +
            (scratch ? " (" + gib(scratch) + " GiB of it scratch)" : std::string()) + ", more than 90% of the " +
            gib(free_b) + " GiB free";
  return c;
}

std::optional<std::string> cannot_run(const Context& ctx, const OpRequest& r, std::uint64_t reserve_bytes) {
  return check_request(ctx, r, reserve_bytes).why;
}

std::unique_ptr<PreparedOp> make_op(Context& ctx, const OpRequest& r, const CheckedRequest& checked) {
  if (checked.why) throw Unsupported(*checked.why);
  if (!checked.impl || !checked.plan) throw std::logic_error("make_op: " + r.kind + " was not checked");
  return checked.impl->prepare(ctx, r, *checked.plan);
}

std::unique_ptr<PreparedOp> make_op(Context& ctx, const OpRequest& r) { return make_op(ctx, r, check_request(ctx, r)); }

}  // namespace phasebench::cuda
