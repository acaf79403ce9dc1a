// The GPU spec table (data/gpus.json, gpu_specs.hpp): loading, lookup by key or
// driver name, and the datasheet ceilings of an entry.
#include "phasebench/gpu_specs.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "phasebench/error.hpp"
#include "phasebench/json_file.hpp"

#ifndef PHASEBENCH_SOURCE_DATA_DIR
#define PHASEBENCH_SOURCE_DATA_DIR "harness/data"
#endif

namespace phasebench {

std::string data_dir() {
  if (const char* env = std::getenv("PHASEBENCH_DATA_DIR"); env && *env) return env;
  return PHASEBENCH_SOURCE_DATA_DIR;
}

namespace {
std::string lower_trim(std::string s) {
  auto not_space = [](unsigned char ch) { return !std::isspace(ch); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return s;
}
// peak_tflops_dense: one dense figure per dtype. "fp64" is not a dtype here (no
// fp64 operations); "fp4" is one FP4 rate for both scaled formats, NVFP4 and
// MXFP4, unless the entry gives that format its own key.
void read_peaks(const nlohmann::json& peaks, std::map<DType, double>& out, const std::string& origin) {
  std::optional<double> fp4;
  for (const auto& [k, v] : peaks.items()) {
    if (k == "fp64") continue;
    const double tf = v.get<double>();
    if (!(tf > 0)) throw InputError(origin + ": peak_tflops_dense." + k + " must be positive");
    if (k == "fp4")
      fp4 = tf;
    else
      out[parse_dtype(k)] = tf;
  }
  if (fp4)
    for (DType t : {DType::nvfp4, DType::mxfp4}) out.try_emplace(t, *fp4);
}
}  // namespace

Ceilings GpuSpec::ceilings() const {
  Ceilings c;
  const std::string doc = "datasheet: " + name + (sources.empty() ? "" : " (" + sources + ")");
  for (const auto& [t, tf] : peak_tflops) c.add_compute(t, Ceiling{tf * 1e12, CeilingSource::datasheet, doc});
  if (memory_bandwidth_gbps > 0) c.add_bandwidth(Ceiling{memory_bandwidth_gbps * 1e9, CeilingSource::datasheet, doc});
  return c;
}

GpuTable GpuTable::load(const std::string& path_in) {
  const std::string path = path_in.empty() ? data_dir() + "/gpus.json" : path_in;
  const auto j = read_json_file(path, "GPU spec table");
  GpuTable t;
  if (!j.contains("gpus") || !j.at("gpus").is_array()) throw InputError("GPU spec table '" + path + "': no \"gpus\" array");
  for (const auto& g : j.at("gpus")) {
    const std::string origin = "GPU spec table '" + path + "' entry " + g.value("key", std::string("?"));
    GpuSpec s;
    try {
      s.key = require_string(g, "key", origin);
      s.name = require_string(g, "name", origin);
      s.driver_names = g.value("driver_names", std::vector<std::string>{});
      s.analytical_only = g.value("analytical_only", false);
      s.architecture = g.value("architecture", std::string{});
      s.compute_capability = g.value("compute_capability", std::string{});
      s.sm_count = g.value("sm_count", 0);
      s.boost_clock_mhz = g.value("boost_clock_mhz", 0);
      s.memory_bytes = require_positive(g, "memory_bytes", origin);
      s.memory_type = g.value("memory_type", std::string{});
      s.memory_bandwidth_gbps = g.at("memory_bandwidth_gbps").get<double>();
      s.memory_bus_width_bits = g.value("memory_bus_width_bits", 0);
      s.l2_bytes = g.value("l2_bytes", std::uint64_t{0});
      s.tdp_watts = g.value("tdp_watts", 0);
      if (g.contains("interconnect")) {
        const auto& ic = g.at("interconnect");
        s.interconnect = ic.at("name").get<std::string>();
        s.interconnect_gbps = ic.at("bandwidth_gbps_bidirectional").get<double>();
        if (!(s.interconnect_gbps > 0)) throw InputError(origin + ": " + s.key + ": interconnect bandwidth must be positive");
        if (ic.contains("collective_latency")) {
          const auto& cl = ic.at("collective_latency");
          s.collective_base_us = cl.at("base_us").get<double>();
          s.collective_step_us = cl.at("per_step_us").get<double>();
          s.collective_latency_source = cl.at("source").get<std::string>();
          if (!(s.collective_base_us >= 0 && s.collective_step_us >= 0) || s.collective_latency_source.empty())
            throw InputError(origin + ": " + s.key + ": collective_latency needs base_us and per_step_us >= 0 and a source");
        }
      }
      if (g.contains("performance_model")) {
        const auto& m = g.at("performance_model");
        GpuSpec::PerformanceModel pm;
        pm.memory_latency_ns = m.at("memory_latency_ns").get<double>();
        pm.memory_latency_source = m.at("memory_latency_source").get<std::string>();
        pm.mma_sync_peak_fraction = m.at("mma_sync_peak_fraction").get<double>();
        pm.mma_sync_source = m.at("mma_sync_source").get<std::string>();
        pm.shared_bytes_per_clock_per_sm = m.at("shared_bytes_per_clock_per_sm").get<double>();
        pm.shared_source = m.at("shared_source").get<std::string>();
        pm.measured_copy_bandwidth_gbps = m.value("measured_copy_bandwidth_gbps", 0.0);
        pm.measured_bf16_gemm_tflops = m.value("measured_bf16_gemm_tflops", 0.0);
        pm.measured_source = m.value("measured_source", std::string());
        if (!(pm.memory_latency_ns > 0) || !(pm.mma_sync_peak_fraction > 0) || pm.mma_sync_peak_fraction > 1 ||
            !(pm.shared_bytes_per_clock_per_sm > 0))
          throw InputError(origin + ": performance_model needs a positive latency, a fraction in (0, 1] and positive "
                                    "shared-memory bytes per clock");
        s.performance_model = pm;
      }
      read_peaks(g.at("peak_tflops_dense"), s.peak_tflops, origin);
      if (g.contains("sources"))
        for (const auto& src : g.at("sources")) {
          if (!s.sources.empty()) s.sources += "; ";
          s.sources += src.value("document", std::string{});
        }
    } catch (const nlohmann::json::exception& e) {
      throw InputError(origin + ": " + e.what());
    }
    t.gpus_.push_back(std::move(s));
  }
  return t;
}

std::optional<GpuSpec> GpuTable::find(const std::string& name) const {
  const auto n = lower_trim(name);
  for (const auto& g : gpus_) {
    if (lower_trim(g.key) == n || lower_trim(g.name) == n) return g;
    // A driver name with or without its vendor prefix: `--gpu b200` finds "NVIDIA B200".
    for (const auto& d : g.driver_names)
      if (lower_trim(d) == n || lower_trim(d) == "nvidia " + n) return g;
  }
  return std::nullopt;
}

GpuSpec GpuTable::get(const std::string& name) const {
  if (auto g = find(name)) return *g;
  std::string known;
  for (const auto& g : gpus_) known += (known.empty() ? "" : ", ") + g.key;
  throw InputError("unknown GPU '" + name + "'; known GPUs: " + known + " (or add it to " + data_dir() + "/gpus.json)");
}

std::optional<GpuSpec> GpuTable::match_driver_name(const std::string& driver_name) const {
  const auto n = lower_trim(driver_name);
  for (const auto& g : gpus_) {
    if (g.analytical_only) continue;
    // A driver name with or without its vendor prefix: `--gpu b200` finds "NVIDIA B200".
    for (const auto& d : g.driver_names)
      if (lower_trim(d) == n || lower_trim(d) == "nvidia " + n) return g;
  }
  return std::nullopt;
}

}  // namespace phasebench
