// How busy the machine was around a run (bench/machine_load.hpp): /proc's text
// parsed, the other processes' and the hypervisor's shares over a run, the
// verdict in the results context and the summary's warning (issue 27).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "machine_load.hpp"
#include "summary.hpp"

using namespace phasebench;

TEST(MachineLoad, ParsesWhatLinuxWrites) {
  const auto l = parse_loadavg("13.33 9.75 5.17 15/174 15762\n");
  ASSERT_TRUE(l);
  EXPECT_DOUBLE_EQ((*l)[0], 13.33);
  EXPECT_DOUBLE_EQ((*l)[2], 5.17);
  EXPECT_FALSE(parse_loadavg("nonsense"));
  // user nice system idle iowait irq softirq steal guest guest_nice
  const auto t = parse_proc_stat("cpu  174766 0 15766 3082288 1570 0 187 1550 0 0");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->total, 174766u + 15766 + 3082288 + 1570 + 187 + 1550);
  EXPECT_EQ(t->idle, 3082288u + 1570);
  EXPECT_EQ(t->steal, 1550u);
  const auto old = parse_proc_stat("cpu 10 0 10 100 0 0 0");  // a kernel without the steal column
  ASSERT_TRUE(old);
  EXPECT_FALSE(old->steal);
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 3 4"));  // one CPU's line, not all of them
  // The command name may hold spaces and parentheses: fields count from the last ')'.
  const auto own = parse_self_stat("4242 (a (b) c) R 1 2 3 4 5 6 7 8 9 10 111 222 0 0 20 0");
  ASSERT_TRUE(own);
  EXPECT_EQ(*own, 333u);
  EXPECT_FALSE(parse_self_stat("4242 (x) R 1 2"));
}

TEST(MachineLoad, SnapshotReadsAProcTree) {
  const auto root = std::filesystem::temp_directory_path() / "phasebench-fake-proc";
  std::filesystem::create_directories(root / "self");
  std::ofstream(root / "loadavg") << "2.50 1.00 0.50 3/100 99\n";
  std::ofstream(root / "stat") << "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n";
  std::ofstream(root / "self" / "stat") << "7 (phasebench) R 1 1 1 0 -1 0 0 0 0 0 30 20 0 0\n";
  const auto s = load_snapshot(root.string());
  ASSERT_TRUE(s.load_average && s.cpu && s.own_ticks);
  EXPECT_DOUBLE_EQ((*s.load_average)[0], 2.5);
  EXPECT_EQ(s.cpu->total, 1000u);
  EXPECT_EQ(*s.own_ticks, 50u);
  std::filesystem::remove_all(root);
  EXPECT_GT(load_snapshot().wall_s, 0.0);  // the real /proc, whatever it holds
}

namespace {
LoadSnapshot snap(double load1, std::uint64_t total, std::uint64_t idle, std::uint64_t steal, std::uint64_t own,
                  double at) {
  LoadSnapshot s;
  s.load_average = std::array<double, 3>{load1, load1, load1};
  s.cpu = CpuTicks{total, idle, steal};
  s.own_ticks = own;
  s.wall_s = at;
  return s;
}
}  // namespace

TEST(MachineLoad, SharesOverTheRunAndTheVerdict) {
  // 1000 ticks over the run: 300 idle, 50 stolen, 250 ours: others used 400 (40%).
  const auto busy = load_json(snap(13.3, 0, 0, 0, 0, 10), snap(12.1, 1000, 300, 50, 250, 20), 2);
  EXPECT_EQ(busy.at("busy"), true) << busy.dump(1);
  EXPECT_NEAR(busy.at("during").at("other_processes_share").get<double>(), 0.40, 1e-12);
  EXPECT_NEAR(busy.at("during").at("steal_share").get<double>(), 0.05, 1e-12);
  EXPECT_NEAR(busy.at("during").at("this_run_share").get<double>(), 0.25, 1e-12);
  EXPECT_DOUBLE_EQ(busy.at("during").at("seconds").get<double>(), 10.0);
  EXPECT_NE(busy.at("why").get<std::string>().find("other processes used 40% of the CPU time"), std::string::npos);
  EXPECT_EQ(busy.at("before").at("load_average").at(0), 13.3);
  // Only this run working: not busy, whatever the load average said before.
  const auto quiet = load_json(snap(1.9, 0, 0, 0, 0, 0), snap(2.0, 1000, 100, 10, 880, 5), 2);
  EXPECT_EQ(quiet.at("busy"), false) << quiet.dump(1);
  // Steal alone can make it busy.
  EXPECT_EQ(load_json(snap(0, 0, 0, 0, 0, 0), snap(0, 1000, 100, 100, 800, 5), 2).at("busy"), true);
  // Interrupted (no after): the load average before decides.
  EXPECT_EQ(load_json(snap(1.5, 0, 0, 0, 0, 0), std::nullopt, 2).at("busy"), true);
  EXPECT_EQ(load_json(snap(0.2, 0, 0, 0, 0, 0), std::nullopt, 2).at("busy"), false);
}

TEST(MachineLoad, TheSummaryWarnsWhenTheMachineWasBusy) {
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 3}}}}}, {"benchmarks", nlohmann::json::array()}};
  doc["context"]["phasebench"]["machine_load"] =
      load_json(snap(13.3, 0, 0, 0, 0, 10), snap(12.1, 1000, 300, 50, 250, 20), 2);
  const auto s = summarize(doc);
  EXPECT_NE(s.find("WARNING: the machine was busy while this ran: other processes used 40% of the CPU time"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("1-minute load average 13.3 before, 12.1 after, on 2 logical CPUs"), std::string::npos) << s;
  doc["context"]["phasebench"]["machine_load"] = load_json(snap(1.9, 0, 0, 0, 0, 0), snap(2.0, 1000, 100, 10, 880, 5), 2);
  EXPECT_EQ(summarize(doc).find("busy"), std::string::npos) << summarize(doc);
}
