// Operation-owned reporting (phasebench/report.hpp): the operations declare their
// summary sections, run records and point reports, and bench/ names no operation
// (docs/design.md, "Reporting"; issue 26's "no file under bench/ names an operation").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "backend.hpp"
#include "phasebench/op.hpp"
#include "standing.hpp"
#include "summary.hpp"
#include "sweep.hpp"

namespace phasebench {
namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every name an operation goes by: kinds, sweep groups, the point ops of a CPU
// sweep of every group, and the C++ constants the operation headers declare.
std::set<std::string> operation_words() {
  std::set<std::string> words;
  const auto& reg = OpRegistry::get();
  for (const auto& d : reg.ops()) words.insert(d.kind);
  for (const auto& g : reg.groups()) words.insert(g.name);
  auto b = make_cpu_backend();
  SweepConfig c;
  apply_defaults(c, *b);
  for (const auto& p : build_sweep(c, *b)) words.insert(p.op);
  return words;
}

std::set<std::string> operation_constants() {
  std::set<std::string> names;
  const std::regex decl(R"(inline\s+constexpr\s+const\s+char\s*\*\s*(k[A-Za-z0-9_]+)\s*=)");
  for (const auto& f : std::filesystem::directory_iterator(std::filesystem::path(PHASEBENCH_SOURCE_DIR) /
                                                           "harness/include/phasebench/ops")) {
    const auto text = read_file(f.path());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), decl); it != std::sregex_iterator(); ++it)
      names.insert((*it)[1]);
  }
  return names;
}

// What in `text` names an operation: a string literal equal to one of its names,
// one of the operations' constants, or an include of an operation's header.
std::vector<std::string> namings(const std::string& text, const std::set<std::string>& words,
                                 const std::set<std::string>& constants) {
  std::vector<std::string> found;
  const std::regex literal("\"([A-Za-z0-9_]+)\"");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), literal); it != std::sregex_iterator(); ++it)
    if (words.count((*it)[1])) found.push_back((*it)[0]);
  const std::regex ident("\\b(k[A-Za-z0-9_]+)\\b");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), ident); it != std::sregex_iterator(); ++it)
    if (constants.count((*it)[1])) found.push_back((*it)[1]);
  if (std::regex_search(text, std::regex(R"(#include\s*"phasebench/ops/)")))
    found.push_back("#include \"phasebench/ops/...\"");
  return found;
}

TEST(Reporting, WordsAndConstantsAreFound) {
  const auto words = operation_words();
  const auto constants = operation_constants();
  // The detector itself: it must see each kind of naming, or the test below proves nothing.
  EXPECT_TRUE(words.count("decode_attention") && words.count("linear_int4") && words.count("layer"));
  EXPECT_TRUE(constants.count("kLayer") && constants.count("kMoe"));
  EXPECT_EQ(namings("if (op == \"linear_int4\") return;", words, constants).size(), 1u);
  EXPECT_EQ(namings("r.kind == kLayer", words, constants).size(), 1u);
  EXPECT_EQ(namings("#include \"phasebench/ops/moe.hpp\"", words, constants).size(), 1u);
  EXPECT_TRUE(namings("\"linear_like\" kLayers \"layers\"", words, constants).empty());
}

TEST(Reporting, BenchNamesNoOperation) {
  const auto words = operation_words();
  const auto constants = operation_constants();
  for (const auto& f : std::filesystem::directory_iterator(std::filesystem::path(PHASEBENCH_SOURCE_DIR) / "bench")) {
    const auto ext = f.path().extension();
    if (ext != ".cpp" && ext != ".hpp") continue;
    for (const auto& n : namings(read_file(f.path()), words, constants))
      ADD_FAILURE() << f.path().filename().string() << " names an operation: " << n
                    << " (declare it with the operation: phasebench/report.hpp)";
  }
}

TEST(Reporting, SectionsRecordsAndPointReportsAreDeclared) {
  const auto& reg = OpRegistry::get();
  std::set<std::string> keys;
  for (const auto& r : reg.records()) keys.insert(r.key);
  EXPECT_EQ(keys, (std::set<std::string>{"decode_linear_crossings", "decode_moe_crossings"}));
  std::set<std::string> names;
  for (const auto& sec : reg.sections()) names.insert(sec.name);
  EXPECT_EQ(names, (std::set<std::string>{"decode attention", "MLA decode attention", "decode linear crossings",
                                          "decode MoE crossings", "decode GEMV, int4 vs bf16", "decode GEMV, fp4 vs bf16",
                                          "whole layer", "tensor-parallel layers", "collectives"}));
  for (std::size_t i = 1; i < reg.sections().size(); ++i)
    EXPECT_LE(reg.sections()[i - 1].order, reg.sections()[i].order) << "sections are kept in order";
  ASSERT_NE(reg.point_report("layer"), nullptr);
  EXPECT_NE(reg.point_report("all_reduce"), nullptr);
  EXPECT_EQ(reg.point_report("linear"), nullptr);
}

// A file that records its crossings is read as it is; one without (schema 1) has
// them computed through the operation's record.
TEST(Reporting, RecordsAreReadOrComputed) {
  nlohmann::json doc = {{"context", {{"phasebench", {{"decode_linear_crossings",
                                                      {{{"layer", "m.recorded"},
                                                        {"dtype", "bf16"},
                                                        {"measured", {{"text", "42"}}},
                                                        {"predicted", nlohmann::json::object()},
                                                        {"ceiling_used", "measured"}}}}}}}},
                        {"benchmarks", nlohmann::json::array()}};
  EXPECT_NE(summarize(doc).find("m.recorded bf16"), std::string::npos) << summarize(doc);
  doc["context"]["phasebench"].erase("decode_linear_crossings");
  EXPECT_EQ(summarize(doc).find("decode linear layers"), std::string::npos) << summarize(doc);
}

}  // namespace
}  // namespace phasebench
