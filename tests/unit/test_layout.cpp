// The kernels folder's layout rules, read from the source tree: the CUDA backend
// and the references include nothing of the CPU backend (kernels/cpu/), and each
// reference file is named after an operation's declaration (harness/src/ops/).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kRoot = fs::path(PHASEBENCH_TEST_DATA_DIR) / ".." / "..";

// "file:line: text" for every #include "<prefix>..." (also through ../) in the files of `dir`.
std::vector<std::string> includes_of(const fs::path& dir, const std::string& prefix) {
  const std::regex inc("^\\s*#\\s*include\\s*\"(\\.\\./)*" + prefix);
  std::vector<std::string> hits;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
      if (std::regex_search(line, inc)) hits.push_back(e.path().filename().string() + ":" + std::to_string(n) + ": " + line);
  }
  return hits;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "\n  " + x;
  return s;
}

TEST(Layout, CudaBackendIncludesNoCpuBackendHeader) {
  const auto hits = includes_of(kRoot / "kernels" / "cuda", "cpu/");
  EXPECT_TRUE(hits.empty()) << "kernels/cuda/ includes the CPU backend's headers; include kernels/reference/ or "
                               "kernels/common/ instead:"
                            << joined(hits);
}

TEST(Layout, ReferencesIncludeNoBackendHeader) {
  for (const char* backend : {"cpu/", "cuda/"}) {
    const auto hits = includes_of(kRoot / "kernels" / "reference", backend);
    EXPECT_TRUE(hits.empty()) << "kernels/reference/ includes a backend's headers (" << backend << "):" << joined(hits);
  }
}

TEST(Layout, EachReferenceIsNamedAfterAnOperationAndHasItsHeader) {
  int files = 0;
  for (const auto& e : fs::directory_iterator(kRoot / "kernels" / "reference")) {
    if (e.path().extension() != ".cpp") continue;
    ++files;
    const std::string name = e.path().stem().string();
    EXPECT_TRUE(fs::exists(e.path().parent_path() / (name + ".hpp"))) << "kernels/reference/" << name << ".cpp has no header";
    if (name == "common") continue;  // what the references share
    EXPECT_TRUE(fs::exists(kRoot / "harness" / "src" / "ops" / (name + ".cpp")))
        << "kernels/reference/" << name << ".cpp is not named after an operation (harness/src/ops/<op>.cpp)";
  }
  EXPECT_GT(files, 1);
}

}  // namespace
