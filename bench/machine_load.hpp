#pragma once
// How busy the machine was around a run: the load average and the CPU time by
// kind (/proc/loadavg, /proc/stat with its steal column, /proc/self/stat) before
// and after, so a results file says whether other work shared the machine while
// it was measured, and the summary can warn before anyone misreads the numbers.
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace phasebench {

// CPU time in clock ticks since boot, over all CPUs (/proc/stat's "cpu" line).
struct CpuTicks {
  std::uint64_t total = 0;  // user + nice + system + idle + iowait + irq + softirq + steal
  std::uint64_t idle = 0;   // idle + iowait
  std::optional<std::uint64_t> steal;  // absent where the line has no steal column
};

struct LoadSnapshot {
  std::optional<std::array<double, 3>> load_average;  // 1, 5, 15 minutes
  std::optional<CpuTicks> cpu;
  std::optional<std::uint64_t> own_ticks;  // this process's user + system ticks
  double wall_s = 0;                       // a steady clock, for the time between two snapshots
};

// The parsers (each nothing when the text is not what Linux writes).
std::optional<std::array<double, 3>> parse_loadavg(const std::string& text);
std::optional<CpuTicks> parse_proc_stat(const std::string& text);
std::optional<std::uint64_t> parse_self_stat(const std::string& text);

// The snapshot now (from `proc_root`, "/proc" unless a test gives another).
LoadSnapshot load_snapshot(const std::string& proc_root = "/proc");

// The machine counts as busy when other processes used more than this share of
// all CPUs' time during the run, or the hypervisor stole more than that share;
// for a run that has no "after" (interrupted), when the 1-minute load average
// before it was at least this many runnable tasks per logical CPU.
inline constexpr double kBusyOtherShare = 0.10;
inline constexpr double kBusyStealShare = 0.05;
inline constexpr double kBusyLoadPerCpu = 0.5;

// context.phasebench.machine_load: the snapshot before the run, and with `after`
// the shares of CPU time in between and the verdict (busy, why).
nlohmann::json load_json(const LoadSnapshot& before, const std::optional<LoadSnapshot>& after, long logical_cpus);

// The summary's warning for a results file's machine_load, or "" when the
// machine was not busy (or the file does not say).
std::string load_warning(const nlohmann::json& run_context);

}  // namespace phasebench
