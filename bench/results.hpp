#pragma once
// The results file: a superset of Google Benchmark's JSON (its tools still read
// it) with the phasebench context (schema version, backend, device, ceilings)
// and structured per-benchmark fields. Rewritten after every finished point by
// write-then-rename, so it is valid JSON at every moment and an interrupted run
// keeps what it measured.
#include <string>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "fixture.hpp"

namespace phasebench {

// 2: context.phasebench.decode_linear_crossings (crossings.hpp). Version 1 files
// are still read (their crossings are computed when summarised).
inline constexpr int kResultsSchemaVersion = 2;
inline constexpr int kOldestReadableSchemaVersion = 1;

class ResultsFile {
 public:
  // Creates the folder and writes an empty (valid) file at once, so an
  // unwritable path is reported before anything runs; throws InputError.
  ResultsFile(std::string path, nlohmann::json phasebench_context);
  const std::string& path() const { return path_; }
  void set_benchmark_context(nlohmann::json ctx);
  void add(nlohmann::json benchmark_entry);
  void set_complete(bool complete);
  void set_phasebench_field(const std::string& key, nlohmann::json value);
  void write();
  const nlohmann::json& document() const { return doc_; }

 private:
  std::string path_;
  nlohmann::json doc_;
};

// Google Benchmark's console table on the terminal, and every run into the results file.
class TeeReporter : public benchmark::BenchmarkReporter {
 public:
  TeeReporter(ResultsFile& file, const BenchContext& ctx);
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& reports) override;
  void Finalize() override;

 private:
  benchmark::ConsoleReporter console_;
  ResultsFile& file_;
  const BenchContext& ctx_;
};

// Default path: results/<device-slug>/<UTC timestamp>.json under `root`.
std::string default_results_path(const std::string& root, const std::string& device_slug);
// Reads a results file back; throws InputError naming the problem (not JSON,
// truncated, no phasebench fields, unknown schema version).
nlohmann::json load_results(const std::string& path);

}  // namespace phasebench
