// The speed-of-light estimate (speed_of_light.hpp): per kernel launch, three
// lower bounds on its time, and the largest is the launch's.
// - Memory: its DRAM bytes (the distinct sectors it touched) at the HBM
//   bandwidth, wave by wave, each wave at the share of the bandwidth that its
//   bytes in flight can sustain (Little's law: bandwidth x latency must be in
//   flight; a wave of R blocks has R x warps x bytes-per-warp).
// - Compute: its issued mma.sync FLOPs at the share of the tensor peak mma.sync
//   reaches, the busiest SM of each wave setting the wave's time.
// - Shared memory: its wavefronts at one per clock per SM, likewise by wave.
// Copies and memsets move their bytes at the bandwidth; library calls are not
// counted, and a point that has one is marked incomplete.
#include "phasebench/speed_of_light.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace phasebench {

namespace {

double traffic(const nlohmann::json& j, const char* space, const char* kind, const char* field) {
  if (!j.contains(space) || !j.at(space).contains(kind)) return 0;
  return j.at(space).at(kind).value(field, 0.0);
}

struct Waves {
  std::uint64_t full = 0, rem = 0, capacity = 0;
};

Waves waves_of(std::uint64_t blocks, int blocks_per_sm, int sms) {
  Waves w;
  w.capacity = static_cast<std::uint64_t>(blocks_per_sm) * static_cast<std::uint64_t>(sms);
  if (w.capacity == 0) return w;
  w.full = blocks / w.capacity;
  w.rem = blocks % w.capacity;
  return w;
}

// Blocks on the busiest SM, summed over the waves: the compute-bound wave count.
double busiest_sm_blocks(const Waves& w, int blocks_per_sm, int sms) {
  double n = static_cast<double>(w.full) * blocks_per_sm;
  if (w.rem) n += std::ceil(static_cast<double>(w.rem) / sms);
  return n;
}

}  // namespace

SolEstimate estimate_speed_of_light(const nlohmann::json& launches, const OpCost& cost, DType dtype, const GpuSpec& gpu) {
  SolEstimate e;
  e.gpu = gpu.key;
  e.formula_bytes = cost.bytes.total();
  e.formula_flops = cost.flops;
  const double datasheet_bw = gpu.memory_bandwidth_gbps * 1e9;
  const int sms = std::max(1, gpu.sm_count);
  const double clock = gpu.boost_clock_mhz * 1e6;
  auto peak_it = gpu.peak_tflops.find(dtype);
  if (peak_it == gpu.peak_tflops.end()) peak_it = gpu.peak_tflops.find(DType::bf16);
  const double peak = peak_it == gpu.peak_tflops.end() ? 0 : peak_it->second * 1e12;
  const GpuSpec::PerformanceModel pm = gpu.performance_model.value_or(GpuSpec::PerformanceModel{});
  // Bytes move no faster than a measured copy where one is known, else the datasheet.
  const double measured_bw = pm.measured_copy_bandwidth_gbps * 1e9;
  const double bw = measured_bw > 0 ? std::min(measured_bw, datasheet_bw) : datasheet_bw;
  e.bandwidth_used = bw;
  e.bandwidth_source = measured_bw > 0 ? "measured copy" : "datasheet";
  if (!gpu.performance_model)
    e.notes.push_back(gpu.key + " has no performance_model in the spec table (latency, mma.sync share): bytes in "
                                "flight and compute are not bounded");
  const double needed_total = bw * pm.memory_latency_ns * 1e-9;
  double sectors = 0, ideal = 0, requests = 0;
  double longest = -1;
  bool regs_unknown = false;
  // Buffers an earlier kernel of the op wrote (id -> size): one that fits in half the
  // L2 is read back from the L2, not from memory (split-KV partials, intermediates).
  std::map<std::uint64_t, std::uint64_t> written;
  for (const auto& j : launches) {
    SolLaunch L;
    L.kind = j.value("kind", std::string("kernel"));
    L.kernel = j.value("kernel", std::string());
    L.short_name = j.value("short_name", L.kernel);
    if (L.kind == "library") {
      e.complete = false;
      L.bound = "none";
      e.launches.push_back(L);
      continue;
    }
    if (L.kind != "kernel") {  // copies and memsets: their bytes at the bandwidth
      L.dram_bytes = j.value("bytes_read", std::uint64_t{0}) + j.value("bytes_written", std::uint64_t{0});
      L.t = L.t_memory = bw > 0 ? static_cast<double>(L.dram_bytes) / bw : 0;
      L.bound = "memory";
      e.dram_bytes += L.dram_bytes;
      e.unique_bytes += L.dram_bytes;
      e.time_s += L.t;
      e.launches.push_back(L);
      continue;
    }
    L.blocks = j.value("blocks", std::uint64_t{0});
    L.threads_per_block = j.value("threads_per_block", 0);
    const int warps_per_block = (L.threads_per_block + 31) / 32;
    const auto& occ = j.at("occupancy");
    L.blocks_per_sm = occ.value("blocks_per_sm", 0);
    L.occupancy_limiter = occ.value("limiter", std::string());
    const int max_warps = std::max(1, occ.value("max_warps_per_sm", 64));
    const auto& res = j.at("resources");
    L.registers_known = res.value("known", false);
    L.registers = res.value("registers", 0);
    if (!L.registers_known) regs_unknown = true;
    L.dram_bytes = (j.value("sectors_read", std::uint64_t{0}) + j.value("sectors_written", std::uint64_t{0})) * 32;
    for (const auto& b : j.value("buffers", nlohmann::json::array())) {
      const auto id = b.value("id", std::uint64_t{0}), size = b.value("size", std::uint64_t{0});
      auto w = written.find(id);
      if (w != written.end() && 2 * size <= gpu.l2_bytes) {
        const std::uint64_t from_l2 = std::min(L.dram_bytes, b.value("sectors_read", std::uint64_t{0}) * 32);
        L.l2_read_bytes += from_l2;
        L.dram_bytes -= from_l2;
      }
    }
    for (const auto& b : j.value("buffers", nlohmann::json::array()))
      if (b.value("sectors_written", std::uint64_t{0}) > 0) written[b.value("id", std::uint64_t{0})] = b.value("size", std::uint64_t{0});
    e.dram_bytes += L.dram_bytes;
    e.l2_read_bytes += L.l2_read_bytes;
    e.unique_bytes += j.value("unique_bytes_read", std::uint64_t{0}) + j.value("unique_bytes_written", std::uint64_t{0});
    double s = 0, id = 0, rq = 0;
    for (const char* k : {"ld", "st", "atom", "ldgsts"}) {
      s += traffic(j, "global", k, "sectors");
      id += traffic(j, "global", k, "ideal");
      rq += traffic(j, "global", k, "requests");
    }
    sectors += s, ideal += id, requests += rq;
    L.sector_efficiency = s > 0 ? id / s : 1;
    double wf = 0, wf_ideal = 0;
    for (const char* k : {"ld", "st", "atom", "ldsm", "ldgsts"}) {
      wf += traffic(j, "shared", k, "sectors");
      wf_ideal += traffic(j, "shared", k, "ideal");
    }
    L.shared_wavefronts = static_cast<std::uint64_t>(wf);
    L.bank_conflicts = static_cast<std::uint64_t>(std::max(0.0, wf - wf_ideal));
    e.shared_wavefronts += L.shared_wavefronts;
    e.bank_conflicts += L.bank_conflicts;
    L.mma_flops = j.value("mma", 0.0) * 4096.0;  // 2 x 16 x 8 x 16 per warp-level m16n8k16

    if (L.blocks_per_sm <= 0 || L.blocks == 0) {
      e.notes.push_back(L.kernel + ": no block fits on an SM (occupancy 0); not bounded");
      L.bound = "none";
      e.launches.push_back(L);
      continue;
    }
    const Waves w = waves_of(L.blocks, L.blocks_per_sm, sms);
    L.waves = static_cast<double>(L.blocks) / static_cast<double>(w.capacity);
    L.last_wave_fill = w.rem ? static_cast<double>(w.rem) / static_cast<double>(w.capacity) : 1.0;
    L.theoretical_occupancy = static_cast<double>(L.blocks_per_sm * warps_per_block) / max_warps;

    // Bytes a warp has in flight: a thread's mean at its stall points x the active
    // lanes of its loads; plain loads can hold no more than its registers.
    const auto& inf = j.at("inflight");
    double per_thread = inf.value("mean_bytes_per_thread", 0.0);
    if (inf.value("async_events", 0) == 0 && L.registers_known && L.registers > 0)
      per_thread = std::min(per_thread, 4.0 * L.registers);
    const double ld_req = traffic(j, "global", "ld", "requests") + traffic(j, "global", "ldgsts", "requests");
    const double ld_lanes = traffic(j, "global", "ld", "lanes") + traffic(j, "global", "ldgsts", "lanes");
    const double lanes = ld_req > 0 ? ld_lanes / ld_req : 32;
    L.inflight_per_warp = per_thread * lanes;
    L.inflight_per_sm = L.inflight_per_warp * warps_per_block * L.blocks_per_sm;
    L.needed_per_sm = needed_total / sms;

    // Memory: wave by wave, each at the bandwidth share its bytes in flight sustain.
    auto share = [&](double resident_blocks) {
      if (needed_total <= 0 || L.inflight_per_warp <= 0) return 1.0;  // stores only, or no latency known
      return std::min(1.0, resident_blocks * warps_per_block * L.inflight_per_warp / needed_total);
    };
    const double per_block = static_cast<double>(L.dram_bytes) / static_cast<double>(L.blocks);
    double tm = 0, occ_time = 0;
    auto wave = [&](double resident, double count) {
      if (count <= 0 || resident <= 0) return;
      const double t = count * resident * per_block / (bw * share(resident));
      tm += t;
      occ_time += t * (resident / sms) * warps_per_block / max_warps;
    };
    wave(static_cast<double>(w.capacity), static_cast<double>(w.full));
    wave(static_cast<double>(w.rem), 1);
    L.t_memory = bw > 0 ? tm : 0;
    L.achieved_occupancy = tm > 0 ? occ_time / tm : L.theoretical_occupancy;
    // Compute and shared memory: the busiest SM of each wave.
    const double busiest = busiest_sm_blocks(w, L.blocks_per_sm, sms);
    if (L.mma_flops > 0 && peak > 0 && pm.mma_sync_peak_fraction > 0)
      L.t_compute = L.mma_flops / static_cast<double>(L.blocks) * busiest * sms / (peak * pm.mma_sync_peak_fraction);
    if (wf > 0 && clock > 0) L.t_shared = wf / static_cast<double>(L.blocks) * busiest / clock;
    L.t = std::max({L.t_memory, L.t_compute, L.t_shared});
    L.bound = L.t == L.t_compute && L.t > 0 ? "compute" : (L.t == L.t_shared && L.t > 0 ? "shared memory" : "memory");
    e.time_s += L.t;
    if (L.t > longest) {
      longest = L.t;
      e.occupancy = L.achieved_occupancy;
      e.waves = L.waves;
      e.last_wave_fill = L.last_wave_fill;
      e.inflight_per_sm = L.inflight_per_sm;
      e.needed_per_sm = L.needed_per_sm;
      e.inflight_fraction = L.needed_per_sm > 0 ? std::min(1.0, L.inflight_per_sm / L.needed_per_sm) : 1.0;
    }
    e.launches.push_back(L);
  }
  e.sector_efficiency = sectors > 0 ? ideal / sectors : 1;
  e.sectors_per_request = requests > 0 ? sectors / requests : 0;
  e.ideal_sectors_per_request = requests > 0 ? ideal / requests : 0;
  e.excess = e.formula_bytes > 0 ? static_cast<double>(e.dram_bytes) / static_cast<double>(e.formula_bytes) - 1 : 0;
  if (e.time_s > 0) {
    e.fraction_of_bandwidth = datasheet_bw > 0 ? static_cast<double>(e.formula_bytes) / (e.time_s * datasheet_bw) : 0;
    e.fraction_of_peak = peak > 0 ? static_cast<double>(e.formula_flops) / (e.time_s * peak) : 0;
    if (measured_bw > 0) e.fraction_of_measured_bandwidth = static_cast<double>(e.formula_bytes) / (e.time_s * measured_bw);
    if (pm.measured_bf16_gemm_tflops > 0)
      e.fraction_of_measured_peak = static_cast<double>(e.formula_flops) / (e.time_s * pm.measured_bf16_gemm_tflops * 1e12);
  }
  const double ridge = datasheet_bw > 0 ? peak / datasheet_bw : 0;
  const double intensity = cost.intensity();
  e.bound = intensity > 0 && ridge > 0 && intensity >= ridge ? "compute" : "memory";
  e.estimated_fraction = e.bound == "compute" ? e.fraction_of_peak : e.fraction_of_bandwidth;
  if (!e.complete)
    e.notes.push_back("library calls (cuBLAS) are emulated by a reference GEMM and not counted: no estimate for the op");
  if (regs_unknown)
    e.notes.push_back("a kernel's registers are not in the nvcc build's table: its occupancy assumes 64 registers");
  return e;
}

nlohmann::json to_json(const SolEstimate& e) {
  nlohmann::json launches = nlohmann::json::array();
  for (const auto& L : e.launches) {
    nlohmann::json j = {{"kernel", L.kernel}, {"kind", L.kind}, {"bound", L.bound}, {"time_lower_bound_s", L.t},
                        {"dram_bytes", L.dram_bytes}, {"l2_read_bytes", L.l2_read_bytes}};
    if (L.kind == "kernel" && L.blocks_per_sm > 0) {
      j.update({{"blocks", L.blocks},
                {"threads_per_block", L.threads_per_block},
                {"blocks_per_sm", L.blocks_per_sm},
                {"registers", L.registers_known ? nlohmann::json(L.registers) : nlohmann::json(nullptr)},
                {"occupancy_limiter", L.occupancy_limiter},
                {"theoretical_occupancy", L.theoretical_occupancy},
                {"achieved_occupancy", L.achieved_occupancy},
                {"waves", L.waves},
                {"last_wave_fill", L.last_wave_fill},
                {"sector_efficiency", L.sector_efficiency},
                {"shared_wavefronts", L.shared_wavefronts},
                {"bank_conflicts", L.bank_conflicts},
                {"inflight_bytes_per_warp", L.inflight_per_warp},
                {"inflight_bytes_per_sm", L.inflight_per_sm},
                {"needed_bytes_per_sm", L.needed_per_sm},
                {"mma_flops", L.mma_flops},
                {"t_memory_s", L.t_memory},
                {"t_compute_s", L.t_compute},
                {"t_shared_s", L.t_shared}});
    }
    launches.push_back(std::move(j));
  }
  return {{"model", "speed-of-light estimate from emulated counters: an upper bound, not a measurement"},
          {"gpu", e.gpu},
          {"formula_bytes", e.formula_bytes},
          {"formula_flops", e.formula_flops},
          {"dram_bytes", e.dram_bytes},
          {"l2_read_bytes", e.l2_read_bytes},
          {"unique_bytes", e.unique_bytes},
          {"excess", e.excess},
          {"sector_efficiency", e.sector_efficiency},
          {"sectors_per_request", e.sectors_per_request},
          {"ideal_sectors_per_request", e.ideal_sectors_per_request},
          {"shared_wavefronts", e.shared_wavefronts},
          {"bank_conflicts", e.bank_conflicts},
          {"occupancy", e.occupancy},
          {"waves", e.waves},
          {"last_wave_fill", e.last_wave_fill},
          {"inflight_bytes_per_sm", e.inflight_per_sm},
          {"needed_bytes_per_sm", e.needed_per_sm},
          {"inflight_fraction", e.inflight_fraction},
          {"time_lower_bound_s", e.time_s},
          {"bound", e.bound},
          {"bandwidth_used_bytes_per_s", e.bandwidth_used},
          {"bandwidth_source", e.bandwidth_source},
          {"fraction_of_bandwidth", e.fraction_of_bandwidth},
          {"fraction_of_peak", e.fraction_of_peak},
          {"fraction_of_measured_bandwidth", e.fraction_of_measured_bandwidth > 0 ? nlohmann::json(e.fraction_of_measured_bandwidth) : nlohmann::json(nullptr)},
          {"fraction_of_measured_peak", e.fraction_of_measured_peak > 0 ? nlohmann::json(e.fraction_of_measured_peak) : nlohmann::json(nullptr)},
          {"estimated_fraction", e.complete ? nlohmann::json(e.estimated_fraction) : nlohmann::json(nullptr)},
          {"complete", e.complete},
          {"notes", e.notes},
          {"launches", std::move(launches)}};
}

}  // namespace phasebench
