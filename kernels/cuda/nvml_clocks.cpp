// SM and memory clocks and throttle reasons through NVML (nvml_clocks.hpp), loaded
// at run time so that a machine without the driver's library still runs.
#include "cuda/nvml_clocks.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <type_traits>

#if PHASEBENCH_HAVE_NVML_H
#include <nvml.h>
#endif

namespace phasebench::cuda {

namespace {
// The few NVML values used here, so that the build needs no nvml.h (not every
// toolkit install has it); where it has, they are checked against it below.
// nvmlReturn_t and nvmlClockType_t are C enums (int).
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlClockMem = 2;
// nvmlClocksEventReason* / nvmlClocksThrottleReason* bits.
struct ReasonBit {
  std::uint64_t bit;
  const char* name;
};
constexpr ReasonBit kReasons[] = {
    {0x1ull, "gpu_idle"},
    {0x2ull, "applications_clocks_setting"},
    {0x4ull, "sw_power_cap"},
    {0x8ull, "hw_slowdown"},
    {0x10ull, "sync_boost"},
    {0x20ull, "sw_thermal_slowdown"},
    {0x40ull, "hw_thermal_slowdown"},
    {0x80ull, "hw_power_brake_slowdown"},
    {0x100ull, "display_clock_setting"},
};
// nvmlPerfPolicyType_t values and the names the results use; LOW_UTILIZATION
// (idle between samples) and the totals are left out.
struct Policy {
  int id;
  const char* name;
};
constexpr Policy kPolicies[] = {{0, "power"}, {1, "thermal"}, {2, "sync_boost"}, {3, "board_limit"}, {5, "reliability"}};
constexpr int kNvmlErrorNotFound = 6;
constexpr int kNvmlProcessorClkSamples = 5;
// nvmlViolationTime_t and nvmlSample_t (value: a union of 8 bytes).
struct ViolationTime {
  unsigned long long reference_us;
  unsigned long long violation_ns;
};
struct ClockSample {
  unsigned long long stamp_us;
  unsigned char value[8];
};
// nvmlValueType_t: how a sample's value reads.
double sample_value(int type, const unsigned char* v) {
  switch (type) {
    case 0: { double d; std::memcpy(&d, v, 8); return d; }
    case 1: { unsigned u; std::memcpy(&u, v, 4); return u; }
    case 2: { unsigned long u; std::memcpy(&u, v, sizeof u); return static_cast<double>(u); }
    case 3: { unsigned long long u; std::memcpy(&u, v, 8); return static_cast<double>(u); }
    case 4: { long long i; std::memcpy(&i, v, 8); return static_cast<double>(i); }
    case 5: { int i; std::memcpy(&i, v, 4); return i; }
    case 6: { unsigned short u; std::memcpy(&u, v, 2); return u; }
    default: return -1;
  }
}

// hw_slowdown, sw_thermal_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown.
constexpr std::uint64_t kThrottling = 0x8ull | 0x20ull | 0x40ull | 0x80ull;

#if PHASEBENCH_HAVE_NVML_H
static_assert(kNvmlSuccess == NVML_SUCCESS && kNvmlClockSm == NVML_CLOCK_SM && kNvmlClockMem == NVML_CLOCK_MEM);
static_assert(kThrottling == (nvmlClocksThrottleReasonHwSlowdown | nvmlClocksThrottleReasonSwThermalSlowdown |
                              nvmlClocksThrottleReasonHwThermalSlowdown | nvmlClocksThrottleReasonHwPowerBrakeSlowdown));
static_assert(0x4ull == nvmlClocksEventReasonSwPowerCap && 0x1ull == nvmlClocksEventReasonGpuIdle);
static_assert(kPolicies[0].id == NVML_PERF_POLICY_POWER && kPolicies[1].id == NVML_PERF_POLICY_THERMAL &&
              kPolicies[2].id == NVML_PERF_POLICY_SYNC_BOOST && kPolicies[3].id == NVML_PERF_POLICY_BOARD_LIMIT &&
              kPolicies[4].id == NVML_PERF_POLICY_RELIABILITY);
static_assert(kNvmlErrorNotFound == NVML_ERROR_NOT_FOUND && kNvmlProcessorClkSamples == NVML_PROCESSOR_CLK_SAMPLES);
static_assert(sizeof(ViolationTime) == sizeof(nvmlViolationTime_t) && sizeof(ClockSample) == sizeof(nvmlSample_t) &&
              offsetof(nvmlSample_t, sampleValue) == offsetof(ClockSample, value) && sizeof(nvmlValue_t) == 8);
static_assert(NVML_VALUE_TYPE_UNSIGNED_INT == 1 && NVML_VALUE_TYPE_UNSIGNED_SHORT == 6);
#endif
}  // namespace

NvmlClocks::NvmlClocks(const std::string& pci_bus_id) {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    const char* e = dlerror();
    why_ = std::string("clocks unavailable: cannot load libnvidia-ml.so.1 (") + (e ? e : "unknown error") + ")";
    return;
  }
  auto sym = [this](const char* name) { return dlsym(lib_, name); };
  auto init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
  auto by_bus = reinterpret_cast<int (*)(const char*, void**)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  shutdown_ = reinterpret_cast<int (*)()>(sym("nvmlShutdown"));
  get_clock_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(sym("nvmlDeviceGetClockInfo"));
  error_string_ = reinterpret_cast<const char* (*)(int)>(sym("nvmlErrorString"));
  // The newer name first (driver 535+); the older one is deprecated but equivalent.
  get_reasons_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(sym("nvmlDeviceGetCurrentClocksEventReasons"));
  if (!get_reasons_)
    get_reasons_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(sym("nvmlDeviceGetCurrentClocksThrottleReasons"));
  get_energy_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(sym("nvmlDeviceGetTotalEnergyConsumption"));
  get_violation_ = reinterpret_cast<int (*)(void*, int, void*)>(sym("nvmlDeviceGetViolationStatus"));
  get_samples_ =
      reinterpret_cast<int (*)(void*, int, unsigned long long, int*, unsigned*, void*)>(sym("nvmlDeviceGetSamples"));
#if PHASEBENCH_HAVE_NVML_H
  // The hand-written signatures above are those of nvml.h (enums as int, handles as void*).
  static_assert(sizeof(nvmlReturn_t) == sizeof(int) && sizeof(nvmlDevice_t) == sizeof(void*));
  static_assert(std::is_same_v<decltype(&nvmlDeviceGetTotalEnergyConsumption),
                               nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*)>);
  static_assert(std::is_same_v<decltype(&nvmlDeviceGetCurrentClocksEventReasons),
                               nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*)>);
  static_assert(std::is_same_v<decltype(&nvmlDeviceGetClockInfo), nvmlReturn_t (*)(nvmlDevice_t, nvmlClockType_t, unsigned int*)>);
  static_assert(std::is_same_v<decltype(&nvmlDeviceGetViolationStatus),
                               nvmlReturn_t (*)(nvmlDevice_t, nvmlPerfPolicyType_t, nvmlViolationTime_t*)>);
  static_assert(std::is_same_v<decltype(&nvmlDeviceGetSamples),
                               nvmlReturn_t (*)(nvmlDevice_t, nvmlSamplingType_t, unsigned long long, nvmlValueType_t*,
                                                unsigned int*, nvmlSample_t*)>);
  static_assert(sizeof(nvmlPerfPolicyType_t) == sizeof(int) && sizeof(nvmlSamplingType_t) == sizeof(int) &&
                sizeof(nvmlValueType_t) == sizeof(int));
#endif
  if (!init || !by_bus || !shutdown_ || !get_clock_) {
    why_ = "clocks unavailable: libnvidia-ml.so.1 lacks nvmlInit_v2/nvmlDeviceGetHandleByPciBusId_v2/nvmlDeviceGetClockInfo";
    dlclose(lib_);
    lib_ = nullptr;
    return;
  }
  if (int rc = init(); rc != kNvmlSuccess) {
    why_ = "clocks unavailable: nvmlInit_v2 failed (" + std::string(error_string_ ? error_string_(rc) : "?") + ")";
    dlclose(lib_);
    lib_ = nullptr;
    return;
  }
  void* dev = nullptr;
  if (int rc = by_bus(pci_bus_id.c_str(), &dev); rc != kNvmlSuccess) {
    why_ = "clocks unavailable: nvmlDeviceGetHandleByPciBusId_v2(" + pci_bus_id + ") failed (" +
           std::string(error_string_ ? error_string_(rc) : "?") + ")";
    shutdown_();
    dlclose(lib_);
    lib_ = nullptr;
    return;
  }
  device_ = dev;
}

std::unique_ptr<NvmlClocks> NvmlClocks::unavailable(const std::string& why) {
  std::unique_ptr<NvmlClocks> n(new NvmlClocks());
  n->why_ = "clocks unavailable: " + why;
  return n;
}

NvmlClocks::~NvmlClocks() {
  if (lib_) {
    if (device_ && shutdown_) shutdown_();
    dlclose(lib_);
  }
}

ClockReading NvmlClocks::read() const {
  ClockReading r;
  if (!device_) {
    r.error = why_;
    return r;
  }
  int rc = get_clock_(device_, kNvmlClockSm, &r.sm_mhz);
  if (rc == kNvmlSuccess) rc = get_clock_(device_, kNvmlClockMem, &r.memory_mhz);
  if (rc != kNvmlSuccess) {
    r.error = "nvmlDeviceGetClockInfo failed (" + std::string(error_string_ ? error_string_(rc) : "?") + ")";
    return r;
  }
  r.ok = true;
  if (get_reasons_) {
    unsigned long long reasons = 0;
    if (get_reasons_(device_, &reasons) == kNvmlSuccess) {
      r.reasons = reasons;
      r.reasons_ok = true;
    }
  }
  return r;
}

bool NvmlClocks::read_energy(double& joules, std::string& error) const {
  if (!device_) {
    const std::string prefix = "clocks unavailable: ";  // why_ speaks of clocks; the reason is the same
    error = "not available: " + (why_.rfind(prefix, 0) == 0 ? why_.substr(prefix.size()) : why_);
    return false;
  }
  if (!get_energy_) {
    error = "not available: libnvidia-ml.so.1 lacks nvmlDeviceGetTotalEnergyConsumption";
    return false;
  }
  unsigned long long mj = 0;
  if (int rc = get_energy_(device_, &mj); rc != kNvmlSuccess) {
    error = "not available: nvmlDeviceGetTotalEnergyConsumption failed (" +
            std::string(error_string_ ? error_string_(rc) : "?") + "; it needs a Volta or later GPU)";
    return false;
  }
  joules = static_cast<double>(mj) * 1e-3;
  return true;
}

ViolationReading NvmlClocks::read_violations() const {
  ViolationReading r;
  if (!device_ || !get_violation_) return r;
  for (const auto& p : kPolicies) {
    ViolationTime t{};
    if (get_violation_(device_, p.id, &t) != kNvmlSuccess) continue;  // not reported by this device
    r.ns[p.name] = t.violation_ns;
    r.ok = true;
  }
  return r;
}

bool NvmlClocks::read_sm_clock_samples(unsigned long long after_us, std::vector<double>& mhz,
                                       unsigned long long& last_us) const {
  mhz.clear();
  if (!device_ || !get_samples_) return false;
  int type = 0;
  unsigned count = 0;
  int rc = get_samples_(device_, kNvmlProcessorClkSamples, after_us, &type, &count, nullptr);  // how many it keeps
  if (rc == kNvmlErrorNotFound) return true;  // none since after_us
  if (rc != kNvmlSuccess) return false;
  if (count == 0) return true;
  std::vector<ClockSample> buf(count);
  rc = get_samples_(device_, kNvmlProcessorClkSamples, after_us, &type, &count, buf.data());
  if (rc == kNvmlErrorNotFound) return true;
  if (rc != kNvmlSuccess) return false;
  for (unsigned i = 0; i < count && i < buf.size(); ++i) {
    if (buf[i].stamp_us <= after_us) continue;
    const double v = sample_value(type, buf[i].value);
    if (v > 0) mhz.push_back(v);
    last_us = std::max(last_us, buf[i].stamp_us);
  }
  return true;
}

bool NvmlClocks::is_throttling(std::uint64_t reasons) { return (reasons & kThrottling) != 0; }

nlohmann::json NvmlClocks::reason_names(std::uint64_t reasons) {
  auto names = nlohmann::json::array();
  std::uint64_t known = 0;
  for (const auto& r : kReasons) {
    known |= r.bit;
    if (reasons & r.bit) names.push_back(r.name);
  }
  if (reasons & ~known) names.push_back("other(0x" + [&] {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(reasons & ~known));
    return std::string(buf);
  }() + ")");
  return names;
}

nlohmann::json NvmlClocks::to_json(const ClockReading& r) {
  if (!r.ok) return {{"error", r.error.empty() ? "clocks unavailable" : r.error}};
  nlohmann::json j = {{"sm_mhz", r.sm_mhz}, {"memory_mhz", r.memory_mhz}};
  if (r.reasons_ok) {
    j["reasons"] = reason_names(r.reasons);
    // The reason bits at this instant, not the point's verdict (its "throttle" block).
    j["slowdown_reason"] = is_throttling(r.reasons);
  } else {
    j["reasons"] = "unavailable";
  }
  return j;
}

}  // namespace phasebench::cuda
