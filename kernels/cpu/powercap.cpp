// RAPL package energy through the powercap sysfs files (powercap.hpp). Only the
// top-level domains (intel-rapl:N, one per package) are summed: their
// subdomains (intel-rapl:N:M, cores and uncore) are parts of the same energy.
#include "cpu/powercap.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace phasebench::cpu {

namespace {

bool read_u64(const std::string& path, std::uint64_t& v, std::string& error) {
  std::ifstream f(path);
  if (!f) {
    error = "cannot read " + path + " (it needs root on most kernels: run as root, or make it readable)";
    return false;
  }
  if (!(f >> v)) {
    error = "cannot parse " + path;
    return false;
  }
  return true;
}

}  // namespace

PowercapEnergy::PowercapEnergy(std::string root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    why_ = "not available: no " + root + " (no RAPL powercap interface on this machine, as on most virtual machines)";
    return;
  }
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const auto name = e.path().filename().string();
    // intel-rapl:0, intel-rapl:1 (AMD's RAPL appears under the same name); not intel-rapl:0:0.
    if (name.rfind("intel-rapl:", 0) == 0 && std::count(name.begin(), name.end(), ':') == 1) dirs.push_back(e.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  if (dirs.empty()) {
    why_ = "not available: no RAPL package domain (intel-rapl:N) under " + root;
    return;
  }
  for (const auto& d : dirs) {
    Domain dom;
    dom.dir = d;
    std::ifstream n(d + "/name");
    if (!(n >> dom.name)) dom.name = fs::path(d).filename().string();
    std::string error;
    if (!read_u64(d + "/max_energy_range_uj", dom.range_uj, error) || !read_u64(d + "/energy_uj", dom.last_uj, error)) {
      why_ = "not available: " + error;
      domains_.clear();
      return;
    }
    domains_.push_back(dom);
  }
}

bool PowercapEnergy::read(double& joules, std::string& error) {
  if (!available()) {
    error = why_;
    return false;
  }
  double total = 0;
  for (auto& d : domains_) {
    std::uint64_t now = 0;
    if (!read_u64(d.dir + "/energy_uj", now, error)) return false;
    // The counter wraps at max_energy_range_uj: a smaller value went round once
    // (readings far apart enough to wrap twice are minutes apart at full power).
    const std::uint64_t delta = now >= d.last_uj ? now - d.last_uj : d.range_uj - d.last_uj + now;
    d.total_uj += static_cast<double>(delta);
    d.last_uj = now;
    total += d.total_uj;
  }
  joules = total * 1e-6;
  return true;
}

std::string PowercapEnergy::describe() const {
  std::string s = "RAPL powercap (package energy, wraps carried):";
  for (const auto& d : domains_) s += " " + d.name + " (" + std::filesystem::path(d.dir).filename().string() + ")";
  return s;
}

}  // namespace phasebench::cpu
