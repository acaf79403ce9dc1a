// What the program says about itself (issue 27, "Also"): --version and the build
// in every results file, the Google Benchmark library's own build type, the
// defaults `model --help` and `run --help` state, and where results go by default.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "build_info.hpp"
#include "cli_test_util.hpp"

namespace fs = std::filesystem;
using phasebench::test::run_cli;

TEST(Build, VersionNamesTheVersionAndTheCommit) {
  const auto r = run_cli("--version");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(^phasebench [0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]{12}|unknown))")))
      << r.out;
  EXPECT_NE(r.out.find("Google Benchmark"), std::string::npos) << r.out;
  const auto& b = phasebench::build_info();
  EXPECT_TRUE(b.git_commit == "unknown" || std::regex_match(b.git_commit, std::regex("[0-9a-f]{40}"))) << b.git_commit;
  EXPECT_FALSE(b.version.empty());
  EXPECT_NE(run_cli("--help").out.find("--version"), std::string::npos);
}

// cmake/BuildInfo.cmake as the build runs it: the commit of a git checkout, and
// "unknown" for a tree without .git (a release tarball) or one unpacked inside
// another repository (which must not take that repository's commit).
TEST(Build, BuildInfoSaysUnknownOutsideItsOwnCheckout) {
  const auto info = [](const fs::path& source) {
    const auto out = fs::temp_directory_path() / "phasebench-build-info.cpp";
    fs::remove(out);
    const std::string cmd = std::string(PHASEBENCH_CMAKE_COMMAND) + " -DSOURCE_DIR=" + source.string() +
                            " -DOUTPUT=" + out.string() +
                            " -DVERSION=9.9.9 -DBUILD_TYPE=Release -DCOMPILER=X -DBENCHMARK_VERSION=1 -P " +
                            PHASEBENCH_SOURCE_DIR + "/cmake/BuildInfo.cmake";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream f(out);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  const auto tarball = fs::temp_directory_path() / "phasebench-tarball";
  fs::remove_all(tarball);
  fs::create_directories(tarball);
  const auto outside = info(tarball);
  EXPECT_NE(outside.find("\"9.9.9\", \"unknown\", false"), std::string::npos) << outside;
  fs::remove_all(tarball);
  const auto inside = fs::path(PHASEBENCH_SOURCE_DIR) / "build-info-test-tarball";
  fs::create_directories(inside);
  const auto nested = info(inside);
  fs::remove_all(inside);
  EXPECT_NE(nested.find("\"9.9.9\", \"unknown\", false"), std::string::npos) << nested;
  const auto own = info(PHASEBENCH_SOURCE_DIR);
  EXPECT_TRUE(own.find("\"unknown\"") != std::string::npos ||
              std::regex_search(own, std::regex("\"9\\.9\\.9\", \"[0-9a-f]{40}\", (true|false)")))
      << own;
}

TEST(Build, ModelHelpShowsEveryDefault) {
  const auto r = run_cli("model --help");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* d : {R"(--batch INT=1\s)", R"(--prompt INT=1024\s)", R"(--gpu TEXT=h100-sxm\s)",
                        R"(--dtype TEXT=bf16\s)", R"(--model TEXT=llama-3\.1-8b\s)", R"(--tp INT=1\s)"})
    EXPECT_TRUE(std::regex_search(r.out, std::regex(d))) << d << "\n" << r.out;
}

TEST(Build, RunHelpStatesTheDefaultSamplingRule) {
  const auto r = run_cli("run --help");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("Sampling (default): each point takes samples until their noise"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(2% on a CPU, 0.5% on a GPU)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--benchmark_min_time=SECONDS alone, use Google Benchmark's loop"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--benchmark_min_time=SECONDS (default here 0.1)"), std::string::npos)
      << "the min time is not the default rule\n" << r.out;
}

// A run without --out writes under the current directory, records the build and
// the machine's load, and says how the Google Benchmark library was built (its
// own build, not this program's).
TEST(Build, DefaultResultsUnderTheCurrentDirectoryWithBuildAndLoad) {
  const auto dir = fs::temp_directory_path() / "phasebench-default-results";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto r = run_cli("run --backend=cpu --ops kv_append --append-batches 1 --append-context 64 --model " +
                             std::string(PHASEBENCH_TEST_DATA_DIR) +
                             "/tiny-llama.json --no-calibrate --max-time 0.05 --energy-window 0",
                         "cd " + dir.string() + " &&");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<fs::path> files;
  if (fs::exists(dir / "results"))
    for (const auto& e : fs::recursive_directory_iterator(dir / "results"))
      if (e.path().extension() == ".json") files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u) << r.out;
  EXPECT_NE(r.out.find("results: results/"), std::string::npos) << r.out;
  std::ifstream f(files[0]);
  const auto j = nlohmann::json::parse(f);
  const auto& pb = j.at("context").at("phasebench");
  EXPECT_EQ(pb.at("build").at("version"), phasebench::build_info().version);
  EXPECT_EQ(pb.at("build").at("git_commit"), phasebench::build_info().git_commit);
  EXPECT_EQ(j.at("context").at("library_build_type"), phasebench::benchmark_library_build_type());
  EXPECT_EQ(pb.at("build").at("google_benchmark").at("library_build_type"), phasebench::benchmark_library_build_type());
  const auto& load = pb.at("machine_load");
  EXPECT_TRUE(load.at("before").at("load_average").is_array()) << load.dump();
  EXPECT_TRUE(load.at("after").at("load_average").is_array()) << load.dump();
  EXPECT_TRUE(load.at("during").at("other_processes_share").is_number()) << load.dump();
  EXPECT_TRUE(load.at("busy").is_boolean());
  // One process (no mpirun): one rank, this host.
  const auto& procs = pb.at("processes");
  EXPECT_EQ(procs.at("count"), 1);
  EXPECT_EQ(procs.at("launcher"), "none");
  ASSERT_EQ(procs.at("ranks").size(), 1u);
  EXPECT_EQ(procs.at("ranks")[0].at("rank"), 0);
  EXPECT_FALSE(procs.at("ranks")[0].at("host").get<std::string>().empty());
  fs::remove_all(dir);
}

// Debian's libbenchmark is compiled without NDEBUG: it says "debug" itself, and
// the results must say what the library says, not what this program's NDEBUG is.
TEST(Build, TheLibraryBuildTypeIsTheLibrarysOwn) {
  const auto t = phasebench::benchmark_library_build_type();
  EXPECT_TRUE(t == "debug" || t == "release") << t;
  const auto note = phasebench::build_json().at("google_benchmark");
  EXPECT_EQ(note.contains("note"), t == "debug") << note.dump();
}
