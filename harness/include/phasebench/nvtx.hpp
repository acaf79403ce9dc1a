#pragma once
// NVTX ranges in the "phasebench" domain, named exactly as the benchmark, so
// Nsight Systems / Nsight Compute can be told to collect one benchmark
// (ncu --nvtx --nvtx-include "phasebench@<name>/"). Costs nothing when no tool is attached.
#include <string>

#include <nvtx3/nvtx3.hpp>

namespace phasebench {

struct nvtx_domain {
  static constexpr char const* name{"phasebench"};
};

// RAII range; push on construction, pop on destruction.
using NvtxRange = nvtx3::scoped_range_in<nvtx_domain>;

inline NvtxRange nvtx_range(const std::string& name) { return NvtxRange{nvtx3::event_attributes{name}}; }

}  // namespace phasebench
