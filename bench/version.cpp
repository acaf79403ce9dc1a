// The program's identity for `phasebench --version` and the results files
// (build_info.hpp): the generated build_info() and what the linked Google
// Benchmark library says about its own build.
#include <benchmark/benchmark.h>

#include <regex>
#include <sstream>

#include "build_info.hpp"

namespace phasebench {

// The library's own JSON reporter writes library_build_type from the library's
// NDEBUG, not ours (Debian's is built with -O2 but without NDEBUG: "debug").
std::string benchmark_library_build_type() {
  static const std::string type = [] {
    std::ostringstream out, err;
    benchmark::JSONReporter json;
    json.SetOutputStream(&out);
    json.SetErrorStream(&err);
    json.ReportContext(benchmark::BenchmarkReporter::Context());
    std::smatch m;
    const std::string text = out.str();
    return std::regex_search(text, m, std::regex("\"library_build_type\"\\s*:\\s*\"([a-z]+)\"")) ? m[1].str()
                                                                                                 : std::string("unknown");
  }();
  return type;
}

namespace {

std::string short_commit(const BuildInfo& b) {
  if (b.git_commit == "unknown") return "commit unknown";
  return "commit " + b.git_commit.substr(0, 12) + (b.git_modified ? " with uncommitted changes" : "");
}

}  // namespace

std::string version_line() {
  const auto& b = build_info();
  return "phasebench " + b.version + " (" + short_commit(b) + ", " + b.build_type + " build, " + b.compiler +
         "; Google Benchmark " + b.benchmark_version + ", library built as " + benchmark_library_build_type() + ")";
}

nlohmann::json build_json() {
  const auto& b = build_info();
  const auto gb_type = benchmark_library_build_type();
  nlohmann::json gb = {{"version", b.benchmark_version}, {"library_build_type", gb_type}};
  if (gb_type == "debug")
    gb["note"] = "the library was compiled without NDEBUG (Debian's libbenchmark is built with -O2 and its internal "
                 "checks on, hence its \"Library was built as DEBUG\" warning); phasebench times every sample itself "
                 "(manual time), so the library's checks are outside every timed region";
  return {{"version", b.version},
          {"git_commit", b.git_commit},
          {"git_modified", b.git_modified},
          {"build_type", b.build_type},
          {"compiler", b.compiler},
          {"google_benchmark", gb}};
}

}  // namespace phasebench
