// Wrong answers the program once accepted silently, through the real binary:
// config fields of the wrong type, empty items and values, duplicate models,
// Google Benchmark flag values it would not check, groups with nothing to run,
// contexts beyond a model's positions, SIGTERM's status, the model command's
// flags and request lines, and the summary of an empty or unfinished file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"

namespace fs = std::filesystem;
using phasebench::test::cli_tmp;
using phasebench::test::run_cli;

namespace {

const std::string kTiny = std::string(PHASEBENCH_TEST_DATA_DIR) + "/tiny-llama.json";

// A tiny CPU sweep (two KV-append points) that would write `out`.
std::string tiny_run(const std::string& out) {
  return "run --backend=cpu --ops kv_append --append-batches 1 --append-context 64 --model " + kTiny +
         " --no-calibrate --benchmark_min_time=0.001 --no-summary --out " + out;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Case {
  std::string args, expect;
};

// Each case: status 2, one line holding `expect`, nothing measured.
void expect_one_line_errors(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    // One line, after at most the line saying which backend the run chose.
    const auto lines = std::count(r.out.begin(), r.out.end(), '\n');
    EXPECT_EQ(lines - (r.out.rfind("phasebench: backend ", 0) == 0 ? 1 : 0), 1) << "one line: " << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("measuring"), std::string::npos) << c.args;
  }
}

}  // namespace

TEST(CliInput, ConfigFieldOfTheWrongTypeIsOneLineAndStatusTwo) {
  const auto d = cli_tmp("input-config");
  fs::create_directories(d);
  struct Field {
    std::string json, expect;
  };
  for (const auto& f : std::vector<Field>{
           {R"("mlp_only_layers": "3")", "field \"mlp_only_layers\" must be a list of layer indices from 0 to 1; it holds '\"3\"' (a string)"},
           {R"("n_shared_experts": "1")", "field \"n_shared_experts\" must be a whole number of 0 or more"},
           {R"("hidden_size": 1099511627776)", "field \"hidden_size\" must be a positive integer (at most 16777216); it holds '1099511627776'"},
           {R"("quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128.5})", "field \"group_size\""},
       }) {
    const auto path = d + "/config.json";
    std::string text = read(kTiny);
    text.insert(text.rfind('}'), ", " + f.json);
    if (f.json.find("n_shared_experts") != std::string::npos) {  // a DeepSeek field: a DeepSeek config
      text.replace(text.find("\"llama\""), 7, "\"deepseek_v3\"");
      text.insert(text.rfind('}'), R"(, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32)");
    }
    if (f.json.find("mlp_only_layers") != std::string::npos) {
      text.replace(text.find("\"llama\""), 7, "\"qwen3_moe\"");
      text.insert(text.rfind('}'), R"(, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32)");
    }
    std::ofstream(path) << text;
    expect_one_line_errors({{"model --config " + path, f.expect}});
    const auto r = run_cli("model --config " + path);
    EXPECT_NE(r.out.find("model config '" + path + "'"), std::string::npos) << "names the file: " << r.out;
  }
  fs::remove_all(d);
}

TEST(CliInput, RunRefusesEmptyItemsEmptyValuesDuplicatesAndUncheckedBenchmarkFlags) {
  const auto out = cli_tmp("input-run.json");
  fs::remove(out);
  // The tiny sweep without the flag each case gives.
  const std::string run = "run --backend=cpu --no-calibrate --no-summary";
  const std::string model = " --model " + kTiny, ops = " --ops kv_append --append-batches 1 --append-context 64",
                    to = " --out " + out;
  const auto base = run + model + ops + to;
  expect_one_line_errors({
      {run + model + to + " --ops kv_append --append-batches 1,,2", "--append-batches: an empty item in '1,,2'"},
      {run + model + to + " --ops kv_append --append-batches 1,2,", "an empty item in '1,2,'"},
      {base + " --axis kv_append.batch=,1", "--axis kv_append.batch: an empty item in ',1'"},
      {base + " --decode-batches ''", "--decode-batches was given an empty value"},
      {base + " --dtype ''", "--dtype was given an empty value"},
      {run + model + to + " --ops ''", "--ops was given an empty value"},
      {run + model + ops + " --out ''", "--out was given an empty value"},
      {base + " --dtype fp32,,fp32", "--dtype: an empty item in 'fp32,,fp32'"},
      {base + " --dtype fp32,fp32", "names fp32 twice"},
      {run + model + to + " --ops kv_append,", "--ops: an empty item"},
      {run + ops + to + " --model " + kTiny + "," + kTiny, "is given twice; give each model once"},
      {base + " --benchmark_format=xml", "--benchmark_format='xml': give console, json or csv"},
      {base + " --benchmark_out_format=yaml", "give console, json or csv"},
      {base + " --benchmark_min_time=-1", "--benchmark_min_time takes seconds above 0 (e.g. 0.1), got '-1'"},
      {base + " --benchmark_min_time=0", "got '0'"},
      {base + " --benchmark_time_unit=h", "give ns, us, ms or s"},
      {base + " --benchmark_filter=", "an empty value"},
      {run + model + to + " --ops kv_append --append-batches 00", "--append-batches: sizes must be positive, got '00'"},
      {base + " --min-samples 2.5", "--min-samples takes a whole number of samples, got '2.5'"},
      {base + " --gpus 0", "--gpus: sizes must be positive, got '0'"},
      {base + " --gpus 2,100", "--gpus: a GPU count from 1 to 72 (one rank a GPU), not 100"},
      {base + " --gpus 2,", "--gpus: an empty item"},
  });
  EXPECT_FALSE(fs::exists(out));
  // Two names of one model: the shipped short name and its file.
  const auto shipped = std::string(PHASEBENCH_SOURCE_DIR) + "/harness/data/models/llama-3.1-8b.json";
  expect_one_line_errors({{run + ops + to + " --model llama-3.1-8b," + shipped, "are both the model 'llama-3.1-8b'"}});
}

TEST(CliInput, AGroupWithNothingToRunSaysWhy) {
  const auto out = cli_tmp("input-groups.json");
  expect_one_line_errors({
      {"run --backend=cpu --ops moe --model " + kTiny + " --out " + out,
       "--ops moe: it runs for mixture-of-experts models, and the model " + kTiny + " is not one"},
      {"run --backend=cpu --ops latent_attention --model " + kTiny + " --out " + out,
       "--ops latent_attention: it runs for multi-head latent attention models"},
      {"run --backend=cpu --ops free --out " + out, "--ops free: the group measures the shapes --shape M,N,K gives"},
  });
}

TEST(CliInput, ContextsBeyondTheModelsPositionsWarnInTheOutputAndTheResults) {
  const auto d = cli_tmp("input-positions");
  fs::create_directories(d);
  const auto cfg = d + "/short.json";
  std::string text = read(kTiny);
  text.insert(text.rfind('}'), R"(, "max_position_embeddings": 100)");
  std::ofstream(cfg) << text;
  const auto out = d + "/r.json";
  fs::remove(out);
  const auto r = run_cli("run --backend=cpu --ops kv_append --append-batches 1 --append-context 128 --model " + cfg +
                         " --no-calibrate --benchmark_min_time=0.001 --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string warning =
      "short: contexts of up to 128 tokens are beyond the model's max_position_embeddings (100): measured anyway";
  EXPECT_NE(r.out.find("phasebench: warning: " + warning), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("WARNING: " + warning), std::string::npos) << "the summary repeats it: " << r.out;
  const auto j = nlohmann::json::parse(read(out));
  const auto& w = j.at("context").at("phasebench").at("warnings");
  ASSERT_EQ(w.size(), 1u) << w;
  EXPECT_NE(w[0].get<std::string>().find(warning), std::string::npos) << w;
  const auto s = run_cli("summary " + out);
  EXPECT_NE(s.out.find("WARNING: " + warning), std::string::npos) << s.out;
  // Within the positions: no warning.
  fs::remove(out);
  const auto ok = run_cli("run --backend=cpu --ops kv_append --append-batches 1 --append-context 64 --model " + cfg +
                          " --no-calibrate --benchmark_min_time=0.001 --no-summary --out " + out);
  ASSERT_EQ(ok.status, 0) << ok.out;
  EXPECT_EQ(ok.out.find("phasebench: warning"), std::string::npos) << ok.out;
  EXPECT_TRUE(nlohmann::json::parse(read(out)).at("context").at("phasebench").at("warnings").empty());
  fs::remove_all(d);
}

TEST(CliInput, SigtermEndsARunWithStatus143) {
  const auto out = cli_tmp("input-sigterm.json");
  fs::remove(out);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    execl(PHASEBENCH_BINARY, PHASEBENCH_BINARY, "run", "--backend=cpu", "--ops", "decode_linear", "--decode-batches",
          "1..64", "--model", PHASEBENCH_TEST_DATA_DIR "/tiny-llama.json", "--no-calibrate", "--benchmark_min_time=0.5",
          "--out", out.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Once the run has its results file (its signal handlers are set), terminate it.
  bool have_point = false;
  for (int i = 0; i < 2400 && !have_point; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    try {
      have_point = !nlohmann::json::parse(read(out)).at("benchmarks").empty();
    } catch (...) {
    }
  }
  kill(pid, have_point ? SIGTERM : SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(have_point) << "no point on disk after 2 minutes";
  ASSERT_TRUE(WIFEXITED(st)) << "status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 143) << "128 + SIGTERM, as a shell reports a terminated process";
  fs::remove(out);
  fs::remove(out + ".lock");
}

TEST(CliInput, ModelFlagsAndRequestLinesSayWhatTheyMean) {
  expect_one_line_errors({
      {"model --hidden 4096", "--hidden sizes the --simple model only"},
      {"model --layers 32", "--layers sizes the --simple model only"},
      {"model --dtype ''", "--dtype was given an empty value"},
      // Values echoed as typed, not as converted.
      {"model --context 00", "--context must be a positive integer, got 00"},
      {"model --batch -0", "--batch must be a positive integer, got -0"},
  });
  const auto one = run_cli("model --generate 1");
  ASSERT_EQ(one.status, 0) << one.out;
  EXPECT_EQ(one.out.find("0.00 us per token"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("1024 prompt + 1 generated token (batch 1)"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("the one token from the prefill, no decode step"), std::string::npos) << one.out;
  const auto many = run_cli("model --generate 16 --batch 4");
  ASSERT_EQ(many.status, 0) << many.out;
  EXPECT_NE(many.out.find("tokens/s across the batch, decode step only)"), std::string::npos) << many.out;
  EXPECT_NE(many.out.find("tokens/s across the batch over the whole request (prefill included)"), std::string::npos)
      << many.out;
  // Llama 4 at whole chunks and either side.
  for (const auto* context : {"8191", "8192", "8193", "16384"}) {
    const auto r = run_cli("model --config " + std::string(PHASEBENCH_TEST_DATA_DIR) +
                           "/llama-4-scout-17b-16e-text.json --gpu h200-sxm --context " + context);
    EXPECT_EQ(r.status, 0) << context << "\n" << r.out.substr(0, 400);
  }
}

TEST(CliInput, SummaryOfAnEmptyOrUnfinishedFileSaysSo) {
  const auto d = cli_tmp("input-summary");
  fs::create_directories(d);
  const auto empty = std::string(PHASEBENCH_CONFORMANCE_DIR) + "/empty-run.json";
  expect_one_line_errors({{"summary " + empty, "holds no points: its run was interrupted before its first point finished"}});
  // A finished file with no points.
  auto j = nlohmann::json::parse(read(empty));
  j["context"]["phasebench"]["complete"] = true;
  std::ofstream(d + "/none.json") << j.dump();
  expect_one_line_errors({{"summary " + d + "/none.json", "holds no points"}});
  // context.phasebench null: one line, not a type error.
  j["context"]["phasebench"] = nullptr;
  std::ofstream(d + "/null.json") << j.dump();
  expect_one_line_errors({{"summary " + d + "/null.json", "has no context.phasebench"}});
  // An interrupted run with points: the summary says it covers those.
  const auto out = d + "/r.json";
  ASSERT_EQ(run_cli(tiny_run(out)).status, 0);
  auto r = nlohmann::json::parse(read(out));
  r["context"]["phasebench"]["complete"] = false;
  std::ofstream(out) << r.dump();
  const auto s = run_cli("summary " + out);
  EXPECT_EQ(s.status, 0) << s.out;
  EXPECT_NE(s.out.find("note: the run did not finish (interrupted, or still running): this covers the 2 point(s) it "
                       "finished"),
            std::string::npos)
      << s.out;
  fs::remove_all(d);
}
