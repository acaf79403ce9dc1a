#pragma once
// SM and memory clocks, clock-limiting ("throttle") reasons, the limiters'
// violation counters, NVML's own SM clock samples and the board's energy
// counter, read through NVML loaded at run time with
// dlopen("libnvidia-ml.so.1"): the library ships with the driver, so linking it
// (CUDA::nvml) would make the binary fail to start on a machine without one,
// such as CI's. Where the toolkit has nvml.h, the entry points are typed and the
// constants checked against it. When NVML is missing the readings say why and
// nothing else changes. No CUDA types here.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace phasebench::cuda {

struct ClockReading {
  bool ok = false;
  unsigned sm_mhz = 0;
  unsigned memory_mhz = 0;
  std::uint64_t reasons = 0;  // NVML clocks-event (throttle) reason bits
  bool reasons_ok = false;
  std::string error;  // why the reading failed, when !ok
};

// How long each limiter has held the clocks below what was asked, in total
// (nvmlDeviceGetViolationStatus; nanoseconds): power, thermal, board_limit,
// reliability, sync_boost. Limiters the device does not report are absent.
struct ViolationReading {
  bool ok = false;  // at least one limiter could be read
  std::map<std::string, unsigned long long> ns;
};

class NvmlClocks {
 public:
  // `pci_bus_id` as cudaDeviceGetPCIBusId writes it, so the NVML device is the
  // CUDA device even when CUDA_VISIBLE_DEVICES renumbers devices.
  explicit NvmlClocks(const std::string& pci_bus_id);
  // No NVML at all (the functional emulation has no device for it to read), and why.
  static std::unique_ptr<NvmlClocks> unavailable(const std::string& why);
  ~NvmlClocks();
  NvmlClocks(const NvmlClocks&) = delete;
  NvmlClocks& operator=(const NvmlClocks&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& why_unavailable() const { return why_; }
  ClockReading read() const;
  // The board's total energy since the driver loaded (nvmlDeviceGetTotalEnergyConsumption,
  // Volta and later), in joules; false with `error` set when it cannot be read.
  bool read_energy(double& joules, std::string& error) const;

  ViolationReading read_violations() const;
  // The SM clock samples NVML's driver took (every ~10-100 ms) after its time
  // stamp `after_us` (0: all it keeps), in MHz; `last_us` becomes the newest
  // sample's stamp (unchanged when there is none). False when it cannot read them.
  bool read_sm_clock_samples(unsigned long long after_us, std::vector<double>& mhz, unsigned long long& last_us) const;

  // Reasons that mean the clocks were held down: hardware slowdown, thermal
  // slowdown (software or hardware), power brake. The software power cap alone
  // is not throttling (under a heavy load it is often set while the clocks stay
  // high: the clock-ratio check judges the clock itself), nor are idle,
  // sync boost or the clock settings.
  static bool is_throttling(std::uint64_t reasons);
  static nlohmann::json reason_names(std::uint64_t reasons);
  // {"sm_mhz":..,"memory_mhz":..,"reasons":[..],"slowdown_reason":bool} or {"error":"clocks unavailable: ..."}
  static nlohmann::json to_json(const ClockReading& r);

 private:
  NvmlClocks() = default;
  void* lib_ = nullptr;
  void* device_ = nullptr;  // nvmlDevice_t
  std::string why_;
  // Resolved entry points (C signatures; see nvml_clocks.cpp).
  int (*shutdown_)() = nullptr;
  int (*get_clock_)(void*, int, unsigned*) = nullptr;
  int (*get_reasons_)(void*, unsigned long long*) = nullptr;
  const char* (*error_string_)(int) = nullptr;
  int (*get_energy_)(void*, unsigned long long*) = nullptr;
  int (*get_violation_)(void*, int, void*) = nullptr;                                      // nvmlViolationTime_t*
  int (*get_samples_)(void*, int, unsigned long long, int*, unsigned*, void*) = nullptr;  // nvmlSample_t*
};

}  // namespace phasebench::cuda
