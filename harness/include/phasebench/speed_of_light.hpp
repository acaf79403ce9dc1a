#pragma once
// The speed-of-light estimate of `phasebench counters`: from the counters of an
// operation's kernels (the emulation's counting build, launch by launch, as
// Backend::count gives them) and a GPU of the spec table, an upper bound on the
// fraction of HBM bandwidth (memory-bound points) or of tensor-core peak
// (compute-bound points) the operation can reach. A model, not a measurement:
// docs/design.md, "Counters and the speed-of-light estimate", gives every term.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "phasebench/dtype.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/workload.hpp"

namespace phasebench {

struct SolLaunch {
  std::string kernel;
  std::string short_name;       // without namespaces and parameters
  std::string kind = "kernel";  // kernel, copy, memset, library
  std::uint64_t blocks = 0;
  int threads_per_block = 0, blocks_per_sm = 0, registers = 0;
  bool registers_known = false;
  std::string occupancy_limiter;
  double theoretical_occupancy = 0;  // resident warps / the SM's maximum, in a full wave
  double achieved_occupancy = 0;     // time-weighted over the waves (the tail wave holds fewer)
  double waves = 0;                  // blocks / (blocks per SM x SMs)
  double last_wave_fill = 0;         // the last wave's blocks / a full wave's (1 when the waves are whole)
  std::uint64_t dram_bytes = 0;      // distinct sectors read and written x 32, less l2_read_bytes
  std::uint64_t l2_read_bytes = 0;   // read from buffers an earlier kernel of the op wrote, if they fit in L2 / 2
  double sector_efficiency = 1;      // global: ideal sectors / sectors
  std::uint64_t shared_wavefronts = 0, bank_conflicts = 0;
  double inflight_per_warp = 0;      // bytes a warp has outstanding where it can stall
  double inflight_per_sm = 0;        // in a full wave
  double needed_per_sm = 0;          // bandwidth per SM x latency (Little's law)
  double mma_flops = 0;              // issued: mma.sync m16n8k16 x 4096
  double t_memory = 0, t_compute = 0, t_shared = 0, t = 0;  // seconds, lower bounds
  std::string bound;                 // memory, compute, shared memory, none
};

struct SolEstimate {
  std::string gpu;
  std::uint64_t formula_bytes = 0, formula_flops = 0;
  std::uint64_t dram_bytes = 0;    // counted: distinct sectors x 32, plus copies and memsets, less L2 reads
  std::uint64_t l2_read_bytes = 0; // reads of what an earlier kernel of the op wrote, small enough for the L2
  std::uint64_t unique_bytes = 0;  // counted: distinct bytes read + written
  double excess = 0;               // dram_bytes / formula_bytes - 1
  double sector_efficiency = 1;    // over every global request
  double sectors_per_request = 0, ideal_sectors_per_request = 0;
  std::uint64_t bank_conflicts = 0, shared_wavefronts = 0;
  double occupancy = 0, waves = 0, last_wave_fill = 0;  // of the launch that takes longest
  double inflight_per_sm = 0, needed_per_sm = 0, inflight_fraction = 1;
  double time_s = 0;  // lower bound over all launches
  std::string bound;  // memory or compute (the op's place on the roofline)
  double bandwidth_used = 0;     // bytes/s the memory bound uses: a measured copy's where known, else the datasheet's
  std::string bandwidth_source;  // "measured copy" or "datasheet"
  double fraction_of_bandwidth = 0, fraction_of_peak = 0;  // of the datasheet
  double fraction_of_measured_bandwidth = 0, fraction_of_measured_peak = 0;  // of the measured ceilings (0: none known)
  double estimated_fraction = 0;  // of bandwidth when memory-bound, of tensor peak when compute-bound
  bool complete = true;           // false: a part of the op is not counted (library calls)
  std::vector<std::string> notes;
  std::vector<SolLaunch> launches;
};

// `launches` is Backend::count's JSON; `dtype` picks the tensor peak.
SolEstimate estimate_speed_of_light(const nlohmann::json& launches, const OpCost& cost, DType dtype, const GpuSpec& gpu);
nlohmann::json to_json(const SolEstimate& e);

}  // namespace phasebench
