#pragma once
// SM and memory clocks, clock-limiting ("throttle") reasons and the board's
// energy counter, read through NVML loaded at run time with
// dlopen("libnvidia-ml.so.1"): the library ships with the driver, so linking it
// (CUDA::nvml) would make the binary fail to start on a machine without one,
// such as CI's. Where the toolkit has nvml.h, the entry points are typed and the
// constants checked against it. When NVML is missing the readings say why and
// nothing else changes. No CUDA types here.
#include <cstdint>
#include <memory>
#include <string>

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

  // Reasons that mean the clocks were held down: hardware slowdown, thermal
  // slowdown (software or hardware), power brake. The software power cap alone
  // is not throttling (under a heavy load it is often set while the clocks stay
  // high: the clock-ratio check judges the clock itself), nor are idle,
  // sync boost or the clock settings.
  static bool is_throttling(std::uint64_t reasons);
  static nlohmann::json reason_names(std::uint64_t reasons);
  // {"sm_mhz":..,"memory_mhz":..,"reasons":[..]} or {"error":"clocks unavailable: ..."}
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
};

}  // namespace phasebench::cuda
