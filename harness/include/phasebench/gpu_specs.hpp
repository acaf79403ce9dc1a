#pragma once
// The GPU datasheet table (harness/data/gpus.json): dense peaks per dtype,
// memory bandwidth and size, SMs, L2, each with the document it comes from.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "phasebench/dtype.hpp"
#include "phasebench/roofline.hpp"

namespace phasebench {

struct GpuSpec {
  std::string key;  // short slug, e.g. "h200-sxm"
  std::string name;
  std::vector<std::string> driver_names;  // as cudaDeviceProp::name reports them
  // For the analytical model only (AMD Instinct): found by --gpu, never taken
  // for a run's device by match_driver_name, whatever its driver_names.
  bool analytical_only = false;
  std::string architecture;
  std::string compute_capability;
  int sm_count = 0;  // compute units (CUs) on AMD
  int boost_clock_mhz = 0;
  std::uint64_t memory_bytes = 0;
  std::string memory_type;
  double memory_bandwidth_gbps = 0;  // decimal GB/s
  int memory_bus_width_bits = 0;
  std::uint64_t l2_bytes = 0;  // the last-level cache: AMD's Infinity Cache
  int tdp_watts = 0;           // the maximum board power the datasheet gives; 0: not in the table
  // GPU-to-GPU link (NVLink, else PCIe) as the datasheet gives it: both
  // directions together, per GPU; 0: not in the table.
  std::string interconnect;
  double interconnect_gbps = 0;
  // A collective's fixed time over that link, as latency + steps x per-step latency
  // (a ring all-reduce over n GPUs: 2(n-1) steps), with its source; 0: none known.
  double collective_base_us = 0, collective_step_us = 0;
  std::string collective_latency_source;
  // Dense; int8 in TOPS. The table's "fp4" key fills nvfp4 and mxfp4 alike (one
  // FP4 rate on the datasheet); "nvfp4" / "mxfp4" keys set one where they differ or
  // only one exists (AMD has no NVFP4).
  std::map<DType, double> peak_tflops;
  std::string sources;                  // documents, joined
  // What the speed-of-light estimate of `phasebench counters` needs beyond the
  // datasheet (speed_of_light.hpp), each with its source; absent for most GPUs.
  struct PerformanceModel {
    double memory_latency_ns = 0;      // idle DRAM load-to-use latency
    std::string memory_latency_source;
    double mma_sync_peak_fraction = 0;  // of the dense tensor peak that mma.sync reaches
    std::string mma_sync_source;
    double shared_bytes_per_clock_per_sm = 0;
    std::string shared_source;
    // Measured ceilings where someone measured them (0: none): the memory-bound
    // estimate moves bytes no faster than the copy, and targets given against
    // measured ceilings compare with the fractions of these.
    double measured_copy_bandwidth_gbps = 0;
    double measured_bf16_gemm_tflops = 0;
    std::string measured_source;
  };
  std::optional<PerformanceModel> performance_model;
  // The datasheet ceilings (compute per dtype, bandwidth) with their sources.
  Ceilings ceilings() const;
};

class GpuTable {
 public:
  // Loads harness/data/gpus.json (or `path`); throws InputError when missing or malformed.
  static GpuTable load(const std::string& path = "");
  const std::vector<GpuSpec>& gpus() const { return gpus_; }
  // By key ("h200-sxm"), marketing name or a driver name (its "NVIDIA " optional: "b200"),
  // case-insensitive.
  std::optional<GpuSpec> find(const std::string& name) const;
  // Like find, but an unknown name is an InputError listing the known keys.
  GpuSpec get(const std::string& name) const;
  // Only an exact driver-name match: an unknown GPU is unknown, never guessed.
  // Analytical-only entries are never matched.
  std::optional<GpuSpec> match_driver_name(const std::string& driver_name) const;

 private:
  std::vector<GpuSpec> gpus_;
};

// Where the shipped data files live: $PHASEBENCH_DATA_DIR, else the source tree's harness/data.
std::string data_dir();

}  // namespace phasebench
