#pragma once
// Running the phasebench binary from a test: its exit status and its stdout and
// stderr together, and temporary paths of the CLI tests.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace phasebench::test {

struct CliResult {
  int status = -1;
  std::string out;
};

// Runs the binary with `args` (a shell word list), stdout and stderr together.
inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  CliResult r;
  const std::string cmd = env + (env.empty() ? "" : " ") + std::string(PHASEBENCH_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (p && fgets(buf.data(), buf.size(), p)) r.out += buf.data();
  const int st = p ? pclose(p) : -1;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline std::string cli_tmp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("phasebench-cli-" + name)).string();
}

}  // namespace phasebench::test
