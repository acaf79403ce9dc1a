#pragma once
// The linear layer operation (harness/src/ops/linear.cpp): Y[M,N] = X[M,K] W^T,
// benchmarked as prefill GEMMs, decode GEMVs and free-form shapes.
#include <cstdint>

#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kLinear = "linear";

OpRequest linear_request(const LinearShape& s, DType dtype, Impl impl, std::uint64_t seed = 0x5eed);

}  // namespace phasebench
