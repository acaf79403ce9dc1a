// The phasebench command end to end: exit codes and messages for bad input,
// JSON from `model --json`, a small CPU sweep, and an interrupted run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"

namespace fs = std::filesystem;

namespace {

using Result = phasebench::test::CliResult;
Result run(const std::string& args) { return phasebench::test::run_cli(args); }
std::string tmp(const std::string& name) { return phasebench::test::cli_tmp(name); }

}  // namespace

TEST(Cli, ModelBadInputs) {
  struct Case {
    std::string args, expect;
  };
  for (const auto& c : std::vector<Case>{
           {"model --model llama-9", "unknown model 'llama-9'"},
           {"model --gpu H300", "unknown GPU 'H300'"},
           {"model --batch 0", "--batch must be a positive integer"},
           {"model --prompt -5", "--prompt must be a positive integer"},
           {"model --dtype fp7", "unknown dtype 'fp7'"},
           {"model --gpu a100-sxm4-80gb --dtype fp8", "no fp8 peak"},
           {"model --batch 1099511627776 --context 1073741824 --allow-long-context", "overflows 64-bit"},
           {"model --context 200000", "beyond the model's max_position_embeddings (131072)"},
           {"model --weight-dtype int3", "unknown weight format 'int3'"},
           {"model --generate -5", "--generate must be a positive integer"},
           {"model --config /nonexistent/config.json", "--config '/nonexistent/config.json': no such file"},
           {"model --simple --hidden 0", "--hidden must be a positive integer, got 0"},
           {"model --hidden abc", "Could not convert: --hidden = abc"},
           {"model --model gpt-oss-20b --weight-dtype int4", "group size 128 does not divide the 2880 inputs of qkv_proj"},
           {"model --model mixtral-8x7b --routing zipf:x", "--routing 'zipf:x': use uniform, or zipf:S"},
           {"model --power -5", "--power must be a positive number of watts per GPU"},
           {"frobnicate", "unknown command"},
       }) {
    const auto r = run(c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.status, 2) << c.args;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one clear line: " << r.out;
  }
}

TEST(Cli, MalformedConfigFile) {
  const auto p = tmp("bad-config.json");
  std::ofstream(p) << R"({"model_type": "llama", "hidden_size": 4096)";
  const auto r = run("model --config " + p);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("not valid JSON"), std::string::npos) << r.out;
  std::ofstream(p) << R"({"model_type": "llama", "hidden_size": 4096})";
  const auto r2 = run("model --config " + p);
  EXPECT_NE(r2.out.find("missing required field \"intermediate_size\""), std::string::npos) << r2.out;
  fs::remove(p);
}

TEST(Cli, ModelJsonAndSimpleMode) {
  const auto r = run("model --model llama-3.1-8b --batch 4 --prompt 1024 --context 2048 --gpu h200-sxm --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("model").at("params"), 8030261248ull);
  EXPECT_EQ(j.at("kv_cache_bytes"), 131072ull * 2048 * 4);
  EXPECT_GT(j.at("ttft_s").get<double>(), 0);
  EXPECT_GT(j.at("per_token_s").get<double>(), 0);
  EXPECT_TRUE(j.at("phases").at("decode").at("ops").is_array());
  const auto s = run("model --simple --hidden 4096 --layers 32 --batch 4 --prompt 1024 --dtype fp16");
  ASSERT_EQ(s.status, 0);
  for (const char* fig : {"201.33 M", "52776.56 GFLOPs", "12.885 GB", "4096.00 FLOP/byte", "51.54 GFLOPs", "4.00 FLOP/byte"})
    EXPECT_NE(s.out.find(fig), std::string::npos) << fig;
}

TEST(Cli, RunBadInputs) {
  struct Case {
    std::string args, expect;
  };
  for (const auto& c : std::vector<Case>{
           {"run --backend=tpu", "unknown backend 'tpu'"},
           {"run --backend=cpu --model nope", "unknown model 'nope'"},
           {"run --backend=cpu --decode-batches 0", "sizes must be positive"},
           {"run --backend=cpu --contexts 8..2", "empty range"},
           {"run --backend=cpu --ops decode_linear --dtype fp99", "unknown dtype"},
           {"run --backend=cpu --ops nothing", "unknown group 'nothing'"},
           {"run --backend=cpu --cache lukewarm", "--cache must be cold or hot"},
           {"run --backend=cpu --cold-timing twice", "--cold-timing must be rotate or single, got 'twice'"},
           {"run --backend=cpu --ops kv_append --append-batches 1 --out /proc/nope/r.json", "cannot create the results folder"},
           {"overhead --backend=cpu --rounds 0", "--reps and --rounds must be at least 1"},
           {"run --backend=cpu --max-noise abc", "--max-noise takes a percentage above 0 (e.g. 0.5 or 0.5%) or off, got 'abc'"},
           {"run --backend=cpu --max-noise 0", "--max-noise takes a percentage above 0"},
           {"run --backend=cpu --min-samples 0", "--min-samples takes a whole number of samples, got '0'"},
           {"run --backend=cpu --max-time -1", "--max-time takes seconds above 0, got '-1'"},
           {"run --backend=cpu --energy-window 1s", "--energy-window takes seconds (0: no energy), got '1s'"},
           {"run --backend=cpu --max-noise 1% --benchmark_min_time=0.1", "choose two different stopping rules"},
           {"run --backend=cpu --ops moe --routing zipf:x", "--routing 'zipf:x': use uniform, or zipf:S"},
           {"run --backend=cpu --ops moe --routing uniform,,hot:0.5", "--routing: an empty item in 'uniform,,hot:0.5'"},
           {"run --backend=cpu --ops moe --routing hot:2", "hot:F for a fraction F of the tokens"},
       }) {
    const auto r = run(c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("measuring ceilings"), std::string::npos) << "bad input must be reported before running: " << c.args;
  }
}

TEST(Cli, SmallCpuSweepWritesResults) {
  const auto out = tmp("sweep.json");
  fs::remove(out);
  const auto r = run("run --backend=cpu --ops decode_linear,kv_append,decode_attention --decode-batches 1 "
                     "--attention-batches 1 --contexts 64 --append-batches 1 --append-context 64 "
                     "--model " + std::string(PHASEBENCH_TEST_DATA_DIR) + "/tiny-llama.json "
                     "--no-calibrate --benchmark_min_time=0.001 --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("backend cpu: chosen with --backend=cpu"), std::string::npos);
  EXPECT_NE(r.out.find("phasebench summary"), std::string::npos);
  std::ifstream f(out);
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j.at("context").at("phasebench").at("complete"), true);
  EXPECT_EQ(j.at("context").at("phasebench").at("schema_version"), 4);
  // Schema 4: one name per operation, a point's op is its kind.
  for (const auto& b : j.at("benchmarks")) {
    if (b.contains("phasebench")) EXPECT_EQ(b.at("phasebench").at("op"), b.at("phasebench").at("op_kind")) << b.at("name");
  }
  // --benchmark_min_time chose Google Benchmark's loop; energy is a reading or a reason, never a number made up.
  EXPECT_EQ(j.at("context").at("phasebench").at("stopping").at("rule"), "google_benchmark_min_time");
  const auto& energy = j.at("context").at("phasebench").at("energy");
  if (energy.at("available") == false) {
    EXPECT_EQ(energy.at("why").get<std::string>().rfind("not available", 0), 0u) << energy;
  }
  // One batch per layer: the crossings are recorded, measured as "one batch only".
  const auto& crossings = j.at("context").at("phasebench").at("decode_linear_crossings");
  ASSERT_EQ(crossings.size(), 5u) << crossings.dump();
  for (const auto& x : crossings) {
    EXPECT_EQ(x.at("measured").at("text"), "one batch only") << x.dump();
    EXPECT_EQ(x.at("batches"), nlohmann::json({1}));
  }
  int ok = 0;
  for (const auto& b : j.at("benchmarks")) {
    ASSERT_TRUE(b.contains("real_time"));
    ASSERT_TRUE(b.contains("phasebench"));
    const auto& p = b.at("phasebench");
    EXPECT_EQ(p.at("status"), "ok") << b.dump();
    ok += p.at("status") == "ok";
    EXPECT_TRUE(p.at("bytes").contains("total"));
    EXPECT_GT(p.at("time").at("median_s").get<double>(), 0);
  }
  EXPECT_GE(ok, 5 + 2 + 2);  // 5 projections (own) + 2 attention + 2 append
  fs::remove(out);
}

TEST(Cli, NoiseStoppingRawSamplesAndEnergyThroughAFakePowercapTree) {
  // The default stopping rule with flags, raw samples in the file, and RAPL
  // energy read through PHASEBENCH_POWERCAP_ROOT (a tree whose counters stand
  // still: 0 J, but every field present).
  const auto out = tmp("noise.json");
  const auto tree = tmp("powercap");
  fs::remove(out);
  fs::remove_all(tree);
  fs::create_directories(tree + "/intel-rapl:0");
  std::ofstream(tree + "/intel-rapl:0/name") << "package-0\n";
  std::ofstream(tree + "/intel-rapl:0/energy_uj") << "1000\n";
  std::ofstream(tree + "/intel-rapl:0/max_energy_range_uj") << "262143328850\n";
  const auto r = phasebench::test::run_cli("run --backend=cpu --ops kv_append --append-batches 1 --append-context 64 --model " +
                         std::string(PHASEBENCH_TEST_DATA_DIR) + "/tiny-llama.json --no-calibrate --max-noise 50% "
                         "--min-samples 7 --max-time 0.5 --energy-window 0.01 --out " + out,
                     "PHASEBENCH_POWERCAP_ROOT=" + tree);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("points converged (noise at most 50%"), std::string::npos) << r.out;
  std::ifstream f(out);
  const auto j = nlohmann::json::parse(f);
  const auto& ctx = j.at("context").at("phasebench");
  EXPECT_EQ(ctx.at("stopping").at("rule"), "noise");
  EXPECT_DOUBLE_EQ(ctx.at("stopping").at("max_noise").get<double>(), 0.5);
  EXPECT_EQ(ctx.at("energy").at("available"), true) << ctx.at("energy");
  EXPECT_NE(ctx.at("energy").at("source").get<std::string>().find("package-0"), std::string::npos);
  int n = 0;
  for (const auto& b : j.at("benchmarks")) {
    const auto& p = b.at("phasebench");
    ASSERT_EQ(p.at("status"), "ok") << b.dump();
    const auto& t = p.at("time");
    EXPECT_GE(t.at("samples_s").size(), 7u);
    EXPECT_EQ(t.at("samples_s").size(), t.at("samples").get<std::size_t>());
    EXPECT_TRUE(t.at("converged").is_boolean());
    EXPECT_EQ(p.at("energy").at("joules_per_run"), 0.0);
    EXPECT_EQ(b.at("iterations"), 1) << "one Google Benchmark iteration holds the samples";
    ++n;
  }
  EXPECT_GE(n, 2);
  fs::remove(out);
  fs::remove_all(tree);
}

TEST(Cli, InterruptedRunKeepsFinishedPoints) {
  const auto out = tmp("interrupted.json");
  const auto err = tmp("interrupted.err");
  fs::remove(out);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    freopen(err.c_str(), "w", stderr);
    freopen("/dev/null", "w", stdout);
    execl(PHASEBENCH_BINARY, PHASEBENCH_BINARY, "run", "--backend=cpu", "--ops", "decode_linear", "--decode-batches",
          "1..64", "--model", PHASEBENCH_TEST_DATA_DIR "/tiny-llama.json", "--no-calibrate", "--benchmark_min_time=0.5",
          "--out", out.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until at least one point is on disk, then interrupt.
  bool have_point = false;
  for (int i = 0; i < 2400 && !have_point; ++i) {  // up to 2 minutes on a loaded machine
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream f(out);
    if (!f) continue;
    try {
      have_point = !nlohmann::json::parse(f).at("benchmarks").empty();
    } catch (...) {
    }
  }
  auto err_text = [&] {
    std::ifstream e(err);
    std::stringstream ss;
    ss << e.rdbuf();
    return ss.str();
  };
  if (!have_point) kill(pid, SIGKILL);
  ASSERT_TRUE(have_point) << "no finished point on disk after 2 minutes; stderr:\n" << err_text();
  kill(pid, SIGINT);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << "status " << st << "; stderr:\n" << err_text();
  ASSERT_EQ(WEXITSTATUS(st), 130) << "the run ended before it was interrupted? stderr:\n" << err_text();
  std::ifstream f(out);
  const auto j = nlohmann::json::parse(f);  // still valid JSON
  EXPECT_FALSE(j.at("benchmarks").empty());
  EXPECT_EQ(j.at("context").at("phasebench").at("complete"), false);
  EXPECT_FALSE(fs::exists(out + ".lock")) << "an interrupted run releases its lock";
  EXPECT_NE(err_text().find("interrupted; results of the finished points are in " + out), std::string::npos) << err_text();
  fs::remove(out);
  fs::remove(err);
}
