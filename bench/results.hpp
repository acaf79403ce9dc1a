#pragma once
// The results file: a superset of Google Benchmark's JSON (its tools still read
// it) with the phasebench context (schema version, backend, device, ceilings)
// and structured per-benchmark fields. Rewritten after every finished point by
// write-then-rename, so it is valid JSON at every moment and an interrupted run
// keeps what it measured (and, before its first point, the file it found).
#include <chrono>
#include <string>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "fixture.hpp"

namespace phasebench {

// 2: context.phasebench.decode_linear_crossings (a run record of the linear operation, phasebench/report.hpp). Version 1 files
// are still read (their crossings are computed when summarised).
inline constexpr int kResultsSchemaVersion = 4;  // 4: a point's op is its kind (one name per operation)
inline constexpr int kOldestReadableSchemaVersion = 1;

// The file a run writes. Nothing measured is lost or clobbered: the constructor
// refuses (InputError, before anything runs) a path that is a folder (or ends in
// '/'), a device, a FIFO or a link, an existing file unless `overwrite`, a file
// another run is writing (its lock, "<path>.lock", holds that run's pid; a lock
// whose run has died is taken over), and a destination it cannot write (it
// creates the folder, then writes the whole document once beside the path and
// removes it). The file itself appears, or replaces the old one, only with the
// run's first finished point: until then the old file is untouched. Every
// write is write-then-rename, so the file is a whole, valid document at every
// moment. The lock goes with the object.
class ResultsFile {
 public:
  ResultsFile(std::string path, nlohmann::json phasebench_context, bool overwrite = false);
  // A document kept in memory only, never written (the ranks of an mpirun run but rank 0).
  struct InMemory {};
  ResultsFile(InMemory, nlohmann::json phasebench_context);
  ~ResultsFile();
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;
  const std::string& path() const { return path_; }
  const std::string& lock_path() const { return lock_; }
  void set_benchmark_context(nlohmann::json ctx);
  void add(nlohmann::json benchmark_entry);
  void set_complete(bool complete);
  void set_phasebench_field(const std::string& key, nlohmann::json value);
  // Writes the document to the path once it holds a finished point or is complete; before that
  // it keeps it in memory (an interrupted run then leaves the path as it found it).
  void write();
  // Whether the path holds this run's document yet (its first point, or the end, was written).
  bool written() const { return written_; }
  const nlohmann::json& document() const { return doc_; }
  // From now until the object goes, SIGINT and SIGTERM remove the lock and any half-written
  // temporary file, print one line that is true at that moment (where the finished `what`
  // are, or that nothing was written and the old file is untouched) and exit 128 + the
  // signal (130, 143).
  void exit_cleanly_on_interrupt(const std::string& what);

 private:
  void take_lock();
  void write_to_path(bool trial);
  std::string path_, lock_, tmp_;
  bool locked_ = false, existed_ = false, written_ = false, handling_signals_ = false, in_memory_ = false;
  nlohmann::json doc_;
};

// Google Benchmark's console table on the terminal, every run into the results
// file, and (`progress`) a line on stderr after each run: runs done of
// `expected_runs`, time elapsed, an estimate of what is left.
class TeeReporter : public benchmark::BenchmarkReporter {
 public:
  TeeReporter(ResultsFile& file, const BenchContext& ctx, std::size_t expected_runs = 0, bool progress = false);
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& reports) override;
  void Finalize() override;

 private:
  void report_progress();
  benchmark::ConsoleReporter console_;
  ResultsFile& file_;
  const BenchContext& ctx_;
  std::size_t expected_ = 0, done_ = 0;
  bool progress_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Progress text: "12/240 runs, 3m02s elapsed, about 57m left" (no estimate before the first run).
std::string progress_line(std::size_t done, std::size_t total, double elapsed_s);

// results/<device>/<UTC time>.json, or "<UTC time>-2.json", ... when a run of the
// same second has it already.
std::string default_results_path(const std::string& root, const std::string& device_slug);
// Reads a results file back; throws InputError naming the problem (not JSON,
// truncated, no phasebench fields, unknown schema version).
nlohmann::json load_results(const std::string& path);

}  // namespace phasebench
