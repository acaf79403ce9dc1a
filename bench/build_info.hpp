#pragma once
// What this program is: its version and the git commit it was built from
// (cmake/BuildInfo.cmake writes them at build time; "unknown" outside a git
// checkout), how it was compiled, and the Google Benchmark it links, for
// `phasebench --version` and every results file.
#include <string>

#include <nlohmann/json.hpp>

namespace phasebench {

struct BuildInfo {
  std::string version;       // the project's version (CMakeLists.txt)
  std::string git_commit;    // full hash, or "unknown"
  bool git_modified = false;  // tracked files differed from the commit when it was built
  std::string build_type;    // CMAKE_BUILD_TYPE
  std::string compiler;      // id and version
  std::string benchmark_version;  // Google Benchmark's, as CMake found it
};
const BuildInfo& build_info();

// "release" or "debug" as the linked Google Benchmark library was compiled (its
// own NDEBUG, which its "Library was built as DEBUG" warning is about), or "unknown".
std::string benchmark_library_build_type();
// One line: "phasebench 0.1.0 (commit 1a2b3c4d..., Release build, GNU 12.2.0)".
std::string version_line();
// context.phasebench.build of a results file.
nlohmann::json build_json();

}  // namespace phasebench
