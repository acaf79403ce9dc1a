#pragma once
// The CUDA backend's roofline ceilings other than the datasheet's:
// theoretical ones from the device's attributes, and measured ones (a read
// kernel and a device-to-device copy over buffers many times the L2; a large
// cuBLASLt GEMM per dtype).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_common.hpp"
#include "phasebench/roofline.hpp"

namespace phasebench::cuda {

// What the ceilings are computed from, read once from the device.
struct DeviceFacts {
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  long long sm_clock_khz = 0;      // cudaDevAttrClockRate: the maximum (boost) SM clock
  long long memory_clock_khz = 0;  // cudaDevAttrMemoryClockRate
  int memory_bus_width_bits = 0;   // cudaDevAttrGlobalMemoryBusWidth
  std::uint64_t l2_bytes = 0;
};

// Dense tensor-core (or, for fp32, CUDA-core) FLOPs per SM per clock for this
// architecture and type, with where the figure comes from; nothing when unknown.
struct PerSmRate {
  double flops_per_clock = 0;
  std::string source;
};
std::optional<PerSmRate> per_sm_dense_rate(int cc_major, int cc_minor, DType t);

// Theoretical ceilings: SMs x max SM clock x per-SM rate per dtype; bus width / 8
// x memory clock x 2 (double data rate) for bandwidth.
Ceilings theoretical_ceilings(const DeviceFacts& f);

// Measured bandwidth: first the read kernel (the one the roofline uses), then
// the copy (bytes read + written). Best of several runs after a warm-up.
void measure_bandwidth(Context& ctx, const DeviceFacts& f, Ceilings& out);
// The L2's read bandwidth (a hot read over half of it), as a cache ceiling.
void measure_l2_bandwidth(Context& ctx, const DeviceFacts& f, Ceilings& out);
// Measured compute for one dtype: a large cuBLASLt GEMM (8192^3 when memory
// allows) on random data, best of several after warm-up. Returns false (and
// says why in *why) when the type cannot be measured on this device.
bool measure_gemm(Context& ctx, DType t, Ceilings& out, std::string* why);

}  // namespace phasebench::cuda
