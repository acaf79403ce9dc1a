// Nothing measured is lost or clobbered, and every bad input is one clean error,
// through the real binary: results paths it must not replace (an existing file,
// a folder, a FIFO, a device node made here, a link), another run's lock, usage
// errors (exit 2 whoever detects them, no results file), listing that only lists,
// a point whose sizes overflow, oversized and absurd config files, progress; and
// interruptions by real signals (the old file whole until a first point, a true
// closing line, 130/143), destinations refused before measuring, --benchmark_out.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"
#include "results.hpp"

namespace fs = std::filesystem;
using phasebench::test::cli_tmp;
using phasebench::test::run_cli;

namespace {

// A tiny CPU sweep (two KV-append points, well under a second) writing `out`.
std::string tiny_run(const std::string& out) {
  return "run --backend=cpu --ops kv_append --append-batches 1 --append-context 64 --model " +
         std::string(PHASEBENCH_TEST_DATA_DIR) + "/tiny-llama.json --no-calibrate --benchmark_min_time=0.001 "
         "--no-summary --out " + out;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A fresh, empty temporary folder for one test.
std::string fresh_dir(const std::string& name) {
  const auto d = cli_tmp(name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(CliSafety, AnExistingResultsFileIsNeverReplacedSilently) {
  const auto d = fresh_dir("existing");
  const auto out = d + "/r.json";
  std::ofstream(out) << "measured yesterday";
  auto r = run_cli(tiny_run(out));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("already exists; give another --out, or --overwrite"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("kv_append/"), std::string::npos) << "refused before running: " << r.out;
  EXPECT_EQ(read(out), "measured yesterday");
  EXPECT_FALSE(fs::exists(out + ".lock"));
  r = run_cli(tiny_run(out) + " --overwrite");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(read(out)).at("context").at("phasebench").at("complete"), true);
  EXPECT_FALSE(fs::exists(out + ".lock")) << "the lock goes with the run";
  fs::remove_all(d);
}

TEST(CliSafety, PathsThatAreNotRegularFilesAreRefused) {
  const auto d = fresh_dir("special");
  const auto fifo = d + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  fs::create_directory(d + "/folder");
  std::ofstream(d + "/target.json") << "keep";
  fs::create_symlink(d + "/target.json", d + "/link.json");
  struct Case {
    std::string path, expect;
  };
  std::vector<Case> cases{{fifo, "is not a regular file"}, {d + "/folder", "is a folder"}, {d + "/link.json", "symbolic link"}};
  // A device node, made inside the temporary folder (never the system's): the
  // case that once replaced /dev/null with a regular file. Needs CAP_MKNOD.
  const auto dev = d + "/null-device";
  const bool have_dev = mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;
  if (have_dev) cases.push_back({dev, "is not a regular file"});
  for (const auto& c : cases) {
    const auto r = run_cli(tiny_run(c.path) + " --overwrite");
    EXPECT_EQ(r.status, 2) << c.path << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.path << "\n" << r.out;
  }
  struct stat st {};
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO is still a FIFO";
  if (have_dev) {
    ASSERT_EQ(lstat(dev.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device node is still a device node";
  }
  EXPECT_EQ(read(d + "/target.json"), "keep");
  EXPECT_TRUE(fs::is_symlink(d + "/link.json"));
  fs::remove_all(d);
  if (!have_dev) GTEST_SKIP() << "checked a FIFO, a folder and a link; no device node (mknod needs CAP_MKNOD here)";
}

TEST(CliSafety, AFileAnotherRunWritesIsRefusedNamingIt) {
  const auto d = fresh_dir("locked");
  const auto out = d + "/r.json";
  // A live run's lock (this test's own pid stands for it).
  std::ofstream(out + ".lock") << getpid() << "\n";
  auto r = run_cli(tiny_run(out));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("is being written by another phasebench run (pid " + std::to_string(getpid())), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(fs::exists(out + ".lock")) << "another run's lock is left alone";
  // The lock of a run that died (killed): taken over.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  std::ofstream(out + ".lock") << child << "\n";
  r = run_cli(tiny_run(out));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".lock"));
  fs::remove_all(d);
}

TEST(CliSafety, UsageErrorsExitTwoAndWriteNothing) {
  const auto d = fresh_dir("usage");
  const auto out = d + "/r.json";
  struct Case {
    std::string args, expect;
  };
  for (const auto& c : std::vector<Case>{
           {"--benchmark_filter=nothing-matches-this", "matches none of the"},
           {"'--benchmark_filter=['", "not a valid regular expression"},
           {"--benchmark_repetitions=0", "--benchmark_repetitions=0: give a whole number of 1 or more"},
           {"--decode-batches=-4", "'-4' is not a positive integer"},
           {"--page-size -16", "'-16' is not a positive integer"},
           {"--int4-batches 17", "--int4-batches takes batches of 1 to 16, got 17"},
           {"--int4-group 48", "int4 group size 48: use 32, 64, 128 or 256"},
           {"--no-such-flag", "no-such-flag"},
           {"--decode-batches", "decode-batches"},
       }) {
    const auto r = run_cli(tiny_run(out) + " " + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_FALSE(fs::exists(out)) << "no results file for " << c.args;
  }
  fs::remove_all(d);
}

TEST(CliSafety, ListingOnlyLists) {
  const auto d = fresh_dir("list");
  const auto out = d + "/r.json";
  const auto r = run_cli(tiny_run(out) + " --benchmark_list_tests");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("decode/kv_append/tiny-llama/fp32/batch:1/context:64/manual_time\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("measuring"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("summary"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(d);
}

TEST(CliSafety, APointWhoseSizesOverflowIsSkippedAndTheSweepGoesOn) {
  const auto d = fresh_dir("overflow");
  const auto out = d + "/r.json";
  const auto r = run_cli("run --backend=cpu --ops free --shape 64,64,64 --shape 1099511627776,4096,4096 --no-calibrate "
                         "--benchmark_min_time=0.001 --no-summary --out " + out);
  ASSERT_EQ(r.status, 0) << "a skipped point is not an error: " << r.out;
  const auto j = nlohmann::json::parse(read(out));
  std::map<std::string, nlohmann::json> by_shape;
  for (const auto& b : j.at("benchmarks")) by_shape[b.at("phasebench").at("shape").at("M").dump()] = b.at("phasebench");
  ASSERT_EQ(by_shape.size(), 2u) << j.dump();
  EXPECT_EQ(by_shape.at("64").at("status"), "ok");
  const auto& big = by_shape.at("1099511627776");
  EXPECT_EQ(big.at("status"), "skipped");
  EXPECT_NE(big.at("message").get<std::string>().find("overflows 64-bit"), std::string::npos) << big.dump();
  EXPECT_FALSE(big.contains("flops")) << "no cost for a point that has none";
  fs::remove_all(d);
}

TEST(CliSafety, ConfigFilesOverSixteenMiBAndAbsurdValuesAreOneShortError) {
  const auto d = fresh_dir("configs");
  const auto huge = d + "/huge.json";
  {
    std::ofstream f(huge);
    f << R"({"model_type": "llama", "hidden_size": )" << std::string(17u << 20, '7') << "}";
  }
  auto r = run_cli("model --config " + huge);
  EXPECT_EQ(r.status, 2) << r.out.substr(0, 400);
  EXPECT_NE(r.out.find("phasebench reads files of at most 16 MiB"), std::string::npos) << r.out.substr(0, 400);
  EXPECT_LT(r.out.size(), 600u) << "the value is not printed";
  // A small file with a long number: named, not printed.
  const auto long_number = d + "/long.json";
  std::ofstream(long_number) << R"({"model_type": "llama", "hidden_size": -)" << std::string(100000, '9') << "}";
  r = run_cli("model --config " + long_number);
  EXPECT_EQ(r.status, 2) << r.out.substr(0, 400);
  EXPECT_LT(r.out.size(), 1000u) << r.out.substr(0, 1000);
  fs::remove_all(d);
}

TEST(CliSafety, ProgressSaysRunsDoneElapsedAndLeft) {
  const auto d = fresh_dir("progress");
  const auto r = run_cli(tiny_run(d + "/r.json"), "PHASEBENCH_PROGRESS=1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("phasebench: 1/2 runs, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("phasebench: 2/2 runs, "), std::string::npos) << r.out;
  EXPECT_EQ(phasebench::progress_line(3, 12, 90.0), "3/12 runs, 1m30s elapsed, about 4m30s left");
  EXPECT_EQ(phasebench::progress_line(0, 12, 5.0), "0/12 runs, 5s elapsed");
  EXPECT_EQ(phasebench::progress_line(12, 12, 4000.0), "12/12 runs, 1h06m elapsed");
  fs::remove_all(d);
}

namespace {

// `phasebench run ARGS` started with stderr into `err`; once `ready()` holds (polled every
// 10 ms, up to 2 minutes on a loaded machine) it gets `sig`. Returns the wait status, or -1
// when `ready()` never held (the run is then killed).
int run_and_signal(const std::vector<std::string>& args, const std::string& err, int sig,
                   const std::function<bool()>& ready) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    freopen("/dev/null", "w", stdout);
    freopen(err.c_str(), "w", stderr);
    std::vector<char*> argv{const_cast<char*>(PHASEBENCH_BINARY), const_cast<char*>("run")};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(PHASEBENCH_BINARY, argv.data());
    _exit(127);
  }
  bool now = false;
  for (int i = 0; i < 12000 && !(now = ready()); ++i) usleep(10000);
  kill(pid, now ? sig : SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  return now ? st : -1;
}

std::vector<std::string> tiny_args(const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> a{"--backend=cpu", "--ops", "kv_append", "--append-batches", "1", "--append-context", "64",
                             "--model", PHASEBENCH_TEST_DATA_DIR "/tiny-llama.json", "--no-summary", "--out", out};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

TEST(CliSafety, ARunKilledBeforeItsFirstPointLeavesNoFileAndItsLock) {
  const auto d = fresh_dir("killed");
  const auto out = d + "/r.json", err = d + "/err";
  // Calibration (seconds of ceiling measurement) comes before the first point.
  const int st = run_and_signal(tiny_args(out, {}), err, SIGKILL, [&] { return read(err).find("measuring ceilings") != std::string::npos; });
  ASSERT_NE(st, -1) << "the run never reached its calibration:\n" << read(err);
  EXPECT_FALSE(fs::exists(out)) << "no file before the first point";
  EXPECT_FALSE(fs::exists(out + ".tmp")) << "the trial write is gone before anything is measured";
  EXPECT_TRUE(fs::exists(out + ".lock")) << "SIGKILL leaves the lock";
  // The next run takes the dead run's lock over.
  const auto r = run_cli(tiny_run(out));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(fs::exists(out + ".lock"));
  fs::remove_all(d);
}

TEST(CliSafety, AnInterruptBeforeTheFirstPointLeavesTheOldFileWholeAndSaysSo) {
  const auto d = fresh_dir("interrupted-early");
  for (const int sig : {SIGINT, SIGTERM}) {
    for (const bool old : {true, false}) {
      const auto out = d + "/r" + std::to_string(sig) + (old ? "-old" : "-new") + ".json", err = out + ".err";
      if (old) std::ofstream(out) << "measured yesterday";
      const int st = run_and_signal(tiny_args(out, {"--overwrite"}), err, sig,
                                    [&] { return read(err).find("measuring ceilings") != std::string::npos; });
      const auto text = read(err);
      ASSERT_TRUE(WIFEXITED(st)) << "status " << st << "\n" << text;
      EXPECT_EQ(WEXITSTATUS(st), 128 + sig) << text;
      if (old) {
        EXPECT_EQ(read(out), "measured yesterday") << "the old file is replaced only with a finished point";
        EXPECT_NE(text.find("interrupted before the first point finished; " + out +
                            " is unchanged (it is replaced only once a point of the new run has finished)"),
                  std::string::npos) << text;
      } else {
        EXPECT_FALSE(fs::exists(out));
        EXPECT_NE(text.find("interrupted before the first point finished; nothing was measured and " + out +
                            " was not written"), std::string::npos) << text;
      }
      EXPECT_EQ(text.find("results of the finished points"), std::string::npos) << text;
      EXPECT_FALSE(fs::exists(out + ".lock"));
      EXPECT_FALSE(fs::exists(out + ".tmp"));
    }
  }
  fs::remove_all(d);
}

TEST(CliSafety, SigtermAfterTheFirstPointKeepsTheFinishedPointsAndExits143) {
  const auto d = fresh_dir("interrupted-late");
  const auto out = d + "/r.json", err = d + "/err";
  std::ofstream(out) << "measured yesterday";
  auto has_point = [&] {
    try {
      return !nlohmann::json::parse(read(out)).at("benchmarks").empty();
    } catch (...) {
      return false;
    }
  };
  // Slow points (half a second each), so that the run is still going when the signal comes.
  const int st = run_and_signal({"--backend=cpu", "--ops", "decode_linear", "--decode-batches", "1..64", "--model",
                                 PHASEBENCH_TEST_DATA_DIR "/tiny-llama.json", "--no-calibrate",
                                 "--benchmark_min_time=0.5", "--overwrite", "--out", out},
                                err, SIGTERM, has_point);
  const auto text = read(err);
  ASSERT_TRUE(WIFEXITED(st)) << "status " << st << "\n" << text;
  EXPECT_EQ(WEXITSTATUS(st), 143) << text;
  const auto j = nlohmann::json::parse(read(out));
  EXPECT_FALSE(j.at("benchmarks").empty());
  EXPECT_EQ(j.at("context").at("phasebench").at("complete"), false);
  EXPECT_NE(text.find("interrupted; results of the finished points are in " + out + " (marked incomplete)"),
            std::string::npos) << text;
  EXPECT_FALSE(fs::exists(out + ".lock"));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  fs::remove_all(d);
}

TEST(CliSafety, ADestinationThatCannotBeWrittenIsRefusedBeforeMeasuring) {
  const auto d = fresh_dir("destinations");
  std::ofstream(d + "/file.txt") << "a file, not a folder";
  struct Case {
    std::string out, expect;
  };
  for (const auto& c : std::vector<Case>{
           {d + "/missing/", "names a folder; give a file path, e.g. '" + d + "/missing/run.json'"},
           {d + "/missing/.", "names a folder"},
           {d + "/file.txt/r.json", "cannot create the results folder"},
           {"/proc/self/r.json", "beside the results file"},
       }) {
    const auto r = run_cli(tiny_run(c.out));
    EXPECT_EQ(r.status, 2) << c.out << "\n" << r.out;
    EXPECT_NE(r.out.find("phasebench: error: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.out << "\n" << r.out;
    EXPECT_EQ(r.out.find("kv_append/"), std::string::npos) << "refused before running: " << r.out;
  }
  EXPECT_FALSE(fs::exists(d + "/missing")) << "a refused path creates nothing";
  fs::remove_all(d);
}

TEST(CliSafety, GoogleBenchmarksOwnOutputFileIsRefusedWithAPointerToOut) {
  const auto d = fresh_dir("benchmark-out");
  const auto out = d + "/r.json", theirs = d + "/gbench.json";
  std::ofstream(theirs) << "measured yesterday";
  for (const std::string& flag : std::vector<std::string>{"--benchmark_out=" + theirs, "--benchmark_out_format=json",
                                 "--benchmark_out=" + d + "/new.json"}) {
    const auto r = run_cli(tiny_run(out) + " " + flag);
    EXPECT_EQ(r.status, 2) << flag << "\n" << r.out;
    EXPECT_NE(r.out.find("is not taken"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("give --out FILE instead"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(out)) << flag;
  }
  EXPECT_EQ(read(theirs), "measured yesterday");
  EXPECT_FALSE(fs::exists(d + "/new.json"));
  fs::remove_all(d);
}

TEST(CliSafety, AFifoOrAFolderGivenAsAnInputFileIsRefusedNotWaitedOn) {
  const auto d = fresh_dir("fifo-input");
  const auto fifo = d + "/config.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  // `timeout` turns a hang (an open() waiting for a writer) into status 124, a failure here.
  for (const std::string& args : std::vector<std::string>{"model --config " + fifo, "summary " + fifo,
                                                          "run --backend=cpu --model " + fifo + " --out " + d + "/r.json",
                                                          "model --config " + d}) {
    const auto r = run_cli(args, "timeout 60");
    EXPECT_EQ(r.status, 2) << args << "\n" << r.out;
    EXPECT_TRUE(r.out.find("is not a regular file (a FIFO, device or socket)") != std::string::npos ||
                r.out.find("is a folder; give the path of a file") != std::string::npos)
        << args << "\n" << r.out;
  }
  EXPECT_FALSE(fs::exists(d + "/r.json"));
  fs::remove_all(d);
}
