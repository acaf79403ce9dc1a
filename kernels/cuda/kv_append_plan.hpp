#pragma once
// KV append's host plan: what the kernel takes, and a request's plan (its
// limits and the params, built once before anything is allocated). Host code;
// the kernel is kv_append.cuh.
#include <memory>
#include <optional>
#include <string>

#include "cuda/cuda_op.hpp"
#include "cuda/kv_append.hpp"
#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

// What is wrong and what is supported, or nothing when supported.
std::optional<std::string> kv_append_unsupported(DType dtype, long long D, bool paged, long long page_size);

// A KV append request's plan (kinds kv_append, kv_append_paged): its limits, and
// when it can run, the params (every pointer null, for the op to set): the S
// new tokens go to the last S positions of a cache of `capacity` tokens.
struct KvAppendPlan : OpPlan {
  bool paged = false;
  KvAppendParams params;
};
std::shared_ptr<const KvAppendPlan> plan_kv_append(const OpRequest& r, const Context& ctx);

}  // namespace phasebench::cuda
