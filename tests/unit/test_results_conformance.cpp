// The conformance set (tests/conformance, README there) through the C++ reader: for
// every <case>.expected.json, the entries standing_points picks, the summary's fraction
// table and crossings, and decode_linear_crossings; tests/python/test_conformance.py
// holds python/phasebench_tools/results.py to the same answers.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "phasebench/ops/linear.hpp"
#include "standing.hpp"
#include "phasebench/error.hpp"
#include "phasebench/json_file.hpp"
#include "results.hpp"
#include "summary.hpp"

namespace phasebench {
namespace {

namespace fs = std::filesystem;

// Every case of the folder, found when the test runs: a new case needs no code.
std::vector<fs::path> expected_files() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(PHASEBENCH_CONFORMANCE_DIR)) {
    const auto name = e.path().filename().string();
    if (name.size() > 14 && name.ends_with(".expected.json")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

// The summary's fraction table: phase, op, impl -> points, best, median (fractions,
// null for "-"), skipped, errors.
using Row = std::tuple<std::string, std::string, std::string>;
std::map<Row, nlohmann::json> fraction_table(const std::string& summary) {
  std::map<Row, nlohmann::json> rows;
  std::istringstream in(summary);
  bool in_table = false;
  auto fraction = [](const std::string& cell) {
    return cell == "-" ? nlohmann::json() : nlohmann::json(std::stod(cell.substr(0, cell.size() - 1)) / 100);
  };
  for (std::string line; std::getline(in, line);) {
    const auto w = words(line);
    if (!in_table) {
      in_table = w.size() >= 8 && w[0] == "phase" && w[1] == "op" && w[2] == "impl" && w[3] == "points";
      continue;
    }
    if (w.size() < 8 || w[3].find_first_not_of("0123456789") != std::string::npos) break;
    rows[{w[0], w[1], w[2]}] = {{"points", std::stoi(w[3])}, {"best", fraction(w[4])}, {"median", fraction(w[5])},
                                {"skipped", std::stoi(w[6])}, {"errors", std::stoi(w[7])}};
  }
  return rows;
}

nlohmann::json crossing_answers(const nlohmann::json& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& x : rows) {
    const auto used = x.at("predicted").value(x.value("ceiling_used", ""), nlohmann::json::object());
    out.push_back({{"layer", x.at("layer")},
                   {"dtype", x.at("dtype")},
                   {"measured_text", x.at("measured").at("text")},
                   {"measured_batch", x.at("measured").at("batch")},
                   {"predicted_batch", used.value("batch", nlohmann::json())}});
  }
  return out;
}

void check_case(const fs::path& expected_path) {
  const auto exp = read_json_file(expected_path.string(), "expected answers");
  const auto path = (fs::path(PHASEBENCH_CONFORMANCE_DIR) / exp.at("fixture").get<std::string>()).string();
  if (!exp.at("readable").get<bool>()) {
    try {
      load_results(path);
      ADD_FAILURE() << "read a file both readers must refuse";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(exp.value("error_contains", "")), std::string::npos) << e.what();
    }
    return;
  }
  const auto doc = load_results(path);

  nlohmann::json standing = nlohmann::json::array();
  const auto& benchmarks = doc.at("benchmarks");
  for (const auto* b : standing_points(doc)) {
    std::size_t i = 0;
    while (i < benchmarks.size() && &benchmarks[i] != b) ++i;
    standing.push_back({{"index", i}, {"status", b->at("phasebench").value("status", nlohmann::json())}});
  }
  nlohmann::json want = nlohmann::json::array();
  for (const auto& s : exp.at("standing")) want.push_back({{"index", s.at("index")}, {"status", s.at("status")}});
  EXPECT_EQ(standing, want);

  const auto summary = summarize(doc);
  const auto table = fraction_table(summary);
  EXPECT_EQ(table.size(), exp.at("groups").size()) << summary;
  for (const auto& g : exp.at("groups")) {
    const auto row = table.find({g.at("phase"), g.at("op"), g.at("impl")});
    if (row == table.end()) {
      ADD_FAILURE() << "no row for " << g.dump() << " in\n" << summary;
      continue;
    }
    for (const char* k : {"points", "skipped", "errors"}) EXPECT_EQ(row->second.at(k), g.at(k)) << k << " " << g.dump();
    for (const char* k : {"best", "median"}) {  // the table shows percent to 0.1
      if (g.at(k).is_null())
        EXPECT_TRUE(row->second.at(k).is_null()) << k << " " << g.dump();
      else
        EXPECT_NEAR(row->second.at(k).get<double>(), g.at(k).get<double>(), 0.0005 + 1e-12) << k << " " << g.dump();
    }
  }

  EXPECT_EQ(crossing_answers(decode_linear_crossings(standing_points(doc), run_context(doc))), exp.at("crossings_computed"));
  // The summary shows the recorded crossings, and computes them where none are (schema 1).
  const auto& shown = exp.at("crossings_recorded").is_null() ? exp.at("crossings_computed") : exp.at("crossings_recorded");
  for (const auto& x : shown) {
    const auto at = summary.find(fmt::format("  {} {} ", x.at("layer").get<std::string>(), x.at("dtype").get<std::string>()));
    ASSERT_NE(at, std::string::npos) << x.dump() << "\n" << summary;
    const auto line = summary.substr(at, summary.find('\n', at) - at);
    EXPECT_NE(line.find(fmt::format(" {} ", x.at("measured_text").get<std::string>())), std::string::npos) << line;
    const auto& p = x.at("predicted_batch");
    const std::string predicted = p.is_number() ? std::to_string(p.get<std::uint64_t>()) : "never";
    EXPECT_TRUE(line.ends_with(fmt::format(" {}", predicted))) << line;
  }
}

TEST(Conformance, EveryCaseOfTheSet) {
  const auto cases = expected_files();
  ASSERT_GE(cases.size(), 10u) << PHASEBENCH_CONFORMANCE_DIR;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.filename().string());
    try {  // a reader that throws on one case still has the others checked
      check_case(c);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

}  // namespace
}  // namespace phasebench
