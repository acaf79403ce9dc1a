// How busy the machine was around a run (machine_load.hpp): Linux's /proc read
// before and after, the other processes' and the hypervisor's share of the CPU
// time in between, and the summary's warning.
#include "machine_load.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

namespace phasebench {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::optional<std::array<double, 3>> parse_loadavg(const std::string& text) {
  std::istringstream in(text);
  std::array<double, 3> v{};
  if (!(in >> v[0] >> v[1] >> v[2])) return std::nullopt;
  return v;
}

std::optional<CpuTicks> parse_proc_stat(const std::string& text) {
  std::istringstream in(text);
  std::string label;
  if (!(in >> label) || label != "cpu") return std::nullopt;
  std::vector<std::uint64_t> f;
  std::uint64_t x = 0;
  while (f.size() < 8 && in >> x) f.push_back(x);
  if (f.size() < 4) return std::nullopt;  // user nice system idle at least
  CpuTicks t;
  for (auto v : f) t.total += v;  // guest time is already inside user (and not listed beyond steal here)
  t.idle = f[3] + (f.size() > 4 ? f[4] : 0);
  if (f.size() > 7) t.steal = f[7];
  return t;
}

std::optional<std::uint64_t> parse_self_stat(const std::string& text) {
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so count from the last ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(text.substr(close + 1));
  std::string tok;
  std::vector<std::string> f;
  while (f.size() < 13 && in >> tok) f.push_back(tok);
  if (f.size() < 13) return std::nullopt;
  try {
    return std::stoull(f[11]) + std::stoull(f[12]);  // utime, stime (fields 14 and 15)
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

LoadSnapshot load_snapshot(const std::string& proc_root) {
  LoadSnapshot s;
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  s.load_average = parse_loadavg(read_text(proc_root + "/loadavg"));
  std::string first;  // the "cpu" line: all CPUs together
  std::istringstream in(read_text(proc_root + "/stat"));
  std::getline(in, first);
  s.cpu = parse_proc_stat(first);
  s.own_ticks = parse_self_stat(read_text(proc_root + "/self/stat"));
  return s;
}

namespace {

nlohmann::json snapshot_json(const LoadSnapshot& s) {
  nlohmann::json j = nlohmann::json::object();
  j["load_average"] = s.load_average ? nlohmann::json(*s.load_average) : nlohmann::json(nullptr);
  return j;
}

}  // namespace

nlohmann::json load_json(const LoadSnapshot& before, const std::optional<LoadSnapshot>& after, long logical_cpus) {
  nlohmann::json j;
  j["logical_cpus"] = logical_cpus;
  j["before"] = snapshot_json(before);
  j["method"] = "load average from /proc/loadavg (1, 5, 15 minutes) before and after the run; over the run, each kind's "
                "share of all CPUs' time from /proc/stat (steal: the hypervisor ran another guest) less this "
                "process's own (/proc/self/stat)";
  std::vector<std::string> why;
  bool busy = false;
  if (after) {
    j["after"] = snapshot_json(*after);
    nlohmann::json during = {{"seconds", after->wall_s - before.wall_s}};
    if (before.cpu && after->cpu && after->cpu->total > before.cpu->total) {
      const double total = static_cast<double>(after->cpu->total - before.cpu->total);
      const double idle = static_cast<double>(after->cpu->idle - before.cpu->idle);
      double steal = 0;
      if (before.cpu->steal && after->cpu->steal) {
        steal = static_cast<double>(*after->cpu->steal - *before.cpu->steal);
        during["steal_share"] = steal / total;
      } else {
        during["steal_share"] = nullptr;
      }
      const double own =
          before.own_ticks && after->own_ticks ? static_cast<double>(*after->own_ticks - *before.own_ticks) : 0.0;
      const double others = std::max(0.0, total - idle - steal - own);
      during["this_run_share"] = own / total;
      during["other_processes_share"] = others / total;
      if (others / total > kBusyOtherShare) {
        busy = true;
        why.push_back(fmt::format("other processes used {:.0f}% of the CPU time", 100 * others / total));
      }
      if (steal / total > kBusyStealShare) {
        busy = true;
        why.push_back(fmt::format("the hypervisor stole {:.0f}% of it", 100 * steal / total));
      }
    }
    j["during"] = during;
  } else if (before.load_average && logical_cpus > 0 &&
             (*before.load_average)[0] >= kBusyLoadPerCpu * static_cast<double>(logical_cpus)) {
    busy = true;
    why.push_back(fmt::format("the 1-minute load average was {:.1f} before the run", (*before.load_average)[0]));
  }
  j["busy"] = busy;
  std::string text;
  for (const auto& w : why) text += (text.empty() ? "" : " and ") + w;
  j["why"] = text;
  return j;
}

std::string load_warning(const nlohmann::json& pb) {
  if (!pb.contains("machine_load") || !pb.at("machine_load").is_object()) return "";
  const auto& m = pb.at("machine_load");
  if (!m.value("busy", false)) return "";
  auto load_text = [&](const char* when) -> std::string {
    if (!m.contains(when)) return "";
    const auto& l = m.at(when).value("load_average", nlohmann::json());
    return l.is_array() && !l.empty() && l.at(0).is_number() ? fmt::format("{:.1f} {}", l.at(0).get<double>(), when) : "";
  };
  std::string loads = load_text("before");
  if (const auto a = load_text("after"); !a.empty()) loads += (loads.empty() ? "" : ", ") + a;
  return fmt::format(
      "  WARNING: the machine was busy while this ran: {}{}.\n"
      "  Times and measured ceilings moved with it: compare this run only with care (phasebench-compare reads\n"
      "  machine_load and the ceilings), or rerun on an idle machine.\n",
      m.value("why", ""),
      loads.empty() ? "" : fmt::format(" (1-minute load average {}, on {} logical CPUs)", loads, m.value("logical_cpus", 0)));
}

}  // namespace phasebench
