#pragma once
// The CPU packages' energy through Linux's powercap sysfs files (RAPL):
// <root>/intel-rapl:N/energy_uj, a microjoule counter per package that wraps
// at max_energy_range_uj. The reader sums the packages and carries the wraps.
#include <cstdint>
#include <string>
#include <vector>

namespace phasebench::cpu {

class PowercapEnergy {
 public:
  // `root` is /sys/class/powercap on a real machine (a fake tree in tests).
  explicit PowercapEnergy(std::string root = "/sys/class/powercap");
  bool available() const { return why_.empty(); }
  // Why there is no counter ("not available: ..."), empty when there is one.
  const std::string& why_unavailable() const { return why_; }
  // Joules since the reader was made (every package, wraps carried); false
  // with `error` set when a counter could not be read this time.
  bool read(double& joules, std::string& error);
  // "RAPL powercap: package-0 (intel-rapl:0), ..."
  std::string describe() const;

 private:
  struct Domain {
    std::string dir, name;
    std::uint64_t range_uj = 0, last_uj = 0;
    double total_uj = 0;  // accumulated since the first reading
  };
  std::vector<Domain> domains_;
  std::string why_;
};

}  // namespace phasebench::cpu
