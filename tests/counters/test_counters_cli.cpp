// `phasebench counters` end to end: from phasebench (which hands the command to
// phasebench-counters beside it) and from phasebench-counters itself; the table
// and the counters file it writes (never replacing one), and bad input as one
// line with exit status 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"

namespace {

using phasebench::test::CliResult;
using phasebench::test::cli_tmp;
using phasebench::test::run_cli;

const std::string kTiny = std::string(PHASEBENCH_TEST_DATA_DIR) + "/tiny-llama.json";
const std::string kSmall = "counters --model " + kTiny + " --ops decode_linear --decode-batches 1";

// A command line through the shell, stdout and stderr together.
CliResult shell(const std::string& cmd) {
  CliResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf{};
  while (p && fgets(buf.data(), buf.size(), p)) r.out += buf.data();
  const int st = p ? pclose(p) : -1;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

CliResult counters(const std::string& args, const std::string& env = "") {
  return shell(env + (env.empty() ? "" : " ") + PHASEBENCH_COUNTERS_BINARY + " " + args);
}

TEST(CountersCli, CountsAPointWritesItsFileAndNeverReplacesIt) {
  const std::string out = cli_tmp("counters.json");
  std::filesystem::remove(out);
  const auto r = counters(kSmall + " --benchmark_filter=down_proj.*impl:own --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("never a measurement"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode_gemv_kernel<1, Bf16Tag>"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("counted 1 point(s): 1 ok"), std::string::npos) << r.out;
  std::ifstream f(out);
  const auto doc = nlohmann::json::parse(f);
  EXPECT_EQ(doc["context"]["phasebench"]["kind"], "counters");
  EXPECT_EQ(doc["context"]["phasebench"]["gpu"]["key"], "h200-sxm");
  EXPECT_TRUE(doc["context"]["phasebench"]["complete"]);
  const auto& pb = doc["benchmarks"][0]["phasebench"];
  EXPECT_EQ(pb["status"], "ok");
  EXPECT_GT(pb["estimate"]["estimated_fraction"].get<double>(), 0.0);
  EXPECT_EQ(pb["counters"][0]["resources"]["registers"], 80);  // from the nvcc build's ptxas report
  const auto again = counters(kSmall + " --benchmark_filter=down_proj.*impl:own --out " + out);
  EXPECT_EQ(again.status, 2);
  EXPECT_NE(again.out.find("already exists"), std::string::npos) << again.out;
  std::filesystem::remove(out);
}

TEST(CountersCli, PhasebenchHandsTheCommandOver) {
  const auto r = run_cli(kSmall + " --benchmark_list_tests");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("decode/linear/tiny-llama.down_proj/bf16/batch:1/impl:own"), std::string::npos) << r.out;
}

TEST(CountersCli, WithoutTheCountingBuildBesideItPhasebenchSaysWhere) {
  const auto dir = std::filesystem::path(cli_tmp("lonely"));
  std::filesystem::create_directories(dir);
  const auto copy = dir / "phasebench";
  std::filesystem::copy_file(PHASEBENCH_BINARY, copy, std::filesystem::copy_options::overwrite_existing);
  const auto r = shell(copy.string() + " " + kSmall);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("phasebench-counters, the counting build"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(CountersCli, BadInputIsOneLineAndStatusTwo) {
  struct Case {
    std::string args, env, says;
  };
  for (const auto& c : {Case{kSmall + " --gpu nosuch", "", "unknown GPU 'nosuch'"},
                        Case{kSmall + " --gpu l4", "", "stands in for h200-sxm, h100-sxm, a100-sxm4-80gb"},
                        Case{kSmall + " --benchmark_filter=nothing-like-this", "", "matches none of the"},
                        Case{kSmall + " --gpu h200-sxm", "PB_EMU_TARGET=a100", "contradicts --gpu h200-sxm"},
                        Case{kSmall + " --decode-batches 0", "", "--decode-batches"}}) {
    SCOPED_TRACE(c.args);
    const auto r = counters(c.args, c.env);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
}

}  // namespace
