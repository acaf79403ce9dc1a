// The results file (results.hpp): written by write-then-rename after every point,
// the console-and-file reporter, and the loader that checks a file before use.
#include "results.hpp"

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "phasebench/error.hpp"
#include "phasebench/json_file.hpp"

namespace phasebench {

namespace fs = std::filesystem;

ResultsFile::ResultsFile(std::string path, nlohmann::json phasebench_context) : path_(std::move(path)) {
  doc_ = {{"context", nlohmann::json::object()}, {"benchmarks", nlohmann::json::array()}};
  doc_["context"]["phasebench"] = std::move(phasebench_context);
  doc_["context"]["phasebench"]["schema_version"] = kResultsSchemaVersion;
  doc_["context"]["phasebench"]["complete"] = false;
  std::error_code ec;
  const fs::path p(path_);
  if (p.has_parent_path()) {
    fs::create_directories(p.parent_path(), ec);
    if (ec) throw InputError("cannot create the results folder '" + p.parent_path().string() + "': " + ec.message());
  }
  if (fs::is_directory(p, ec)) throw InputError("--out '" + path_ + "' is a folder; give a file path");
  write();
}

void ResultsFile::set_benchmark_context(nlohmann::json ctx) {
  auto pb = doc_["context"]["phasebench"];
  doc_["context"] = std::move(ctx);
  doc_["context"]["phasebench"] = std::move(pb);
}

void ResultsFile::add(nlohmann::json entry) { doc_["benchmarks"].push_back(std::move(entry)); }

void ResultsFile::set_phasebench_field(const std::string& key, nlohmann::json value) {
  doc_["context"]["phasebench"][key] = std::move(value);
}

void ResultsFile::set_complete(bool complete) { doc_["context"]["phasebench"]["complete"] = complete; }

void ResultsFile::write() {
  // Write-then-rename: the file on disk is always a whole, valid document.
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw InputError("cannot write results file '" + tmp + "': check the folder exists and is writable");
    // error_handler_t::replace keeps the file valid even if a label held bad UTF-8.
    out << doc_.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    out.flush();
    if (!out) throw InputError("writing results file '" + tmp + "' failed (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, path_, ec);
  if (ec) throw InputError("cannot move '" + tmp + "' to '" + path_ + "': " + ec.message());
}

namespace {

std::string time_unit_string(benchmark::TimeUnit u) {
  switch (u) {
    case benchmark::kNanosecond: return "ns";
    case benchmark::kMicrosecond: return "us";
    case benchmark::kMillisecond: return "ms";
    case benchmark::kSecond: return "s";
  }
  return "ns";
}

nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

std::string iso_now() {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

TeeReporter::TeeReporter(ResultsFile& file, const BenchContext& ctx) : file_(file), ctx_(ctx) {
  console_.SetOutputStream(&std::cout);
  console_.SetErrorStream(&std::cerr);
}

bool TeeReporter::ReportContext(const Context& c) {
  // The same context fields Google Benchmark's JSON reporter writes.
  nlohmann::json j;
  j["date"] = iso_now();
  j["host_name"] = c.sys_info.name;
  j["executable"] = Context::executable_name ? Context::executable_name : "";
  j["num_cpus"] = c.cpu_info.num_cpus;
  j["mhz_per_cpu"] = static_cast<int>(c.cpu_info.cycles_per_second / 1e6);
  j["cpu_scaling_enabled"] = c.cpu_info.scaling == benchmark::CPUInfo::ENABLED;
  nlohmann::json caches = nlohmann::json::array();
  for (const auto& cache : c.cpu_info.caches)
    caches.push_back({{"type", cache.type}, {"level", cache.level}, {"size", cache.size}, {"num_sharing", cache.num_sharing}});
  j["caches"] = caches;
  nlohmann::json load = nlohmann::json::array();
  for (double l : c.cpu_info.load_avg) load.push_back(num(l));
  j["load_avg"] = load;
#ifdef NDEBUG
  j["library_build_type"] = "release";
#else
  j["library_build_type"] = "debug";
#endif
  file_.set_benchmark_context(std::move(j));
  file_.write();
  return console_.ReportContext(c);
}

void TeeReporter::ReportRuns(const std::vector<Run>& reports) {
  console_.ReportRuns(reports);
  for (const auto& r : reports) {
    nlohmann::json e;
    e["name"] = r.benchmark_name();
    e["family_index"] = r.family_index;
    e["per_family_instance_index"] = r.per_family_instance_index;
    e["run_name"] = r.run_name.str();
    e["run_type"] = r.run_type == Run::RT_Iteration ? "iteration" : "aggregate";
    e["repetitions"] = r.repetitions;
    if (r.run_type != Run::RT_Aggregate) e["repetition_index"] = r.repetition_index;
    e["threads"] = r.threads;
    if (r.run_type == Run::RT_Aggregate) {
      e["aggregate_name"] = r.aggregate_name;
      e["aggregate_unit"] = r.aggregate_unit == benchmark::kPercentage ? "percentage" : "time";
    }
    if (r.error_occurred) {
      e["error_occurred"] = true;
      e["error_message"] = r.error_message;
    }
    e["iterations"] = r.iterations;
    e["real_time"] = num(r.GetAdjustedRealTime());
    e["cpu_time"] = num(r.GetAdjustedCPUTime());
    e["time_unit"] = time_unit_string(r.time_unit);
    if (!r.report_label.empty()) e["label"] = r.report_label;
    for (const auto& [k, c] : r.counters) e[k] = num(c.value);
    // Structured fields, keyed by the registered name (without /manual_time).
    if (r.run_type == Run::RT_Iteration || r.aggregate_name == "median") {
      auto pj = ctx_.point_json(r.run_name.function_name);
      if (!pj.is_null()) e["phasebench"] = std::move(pj);
    }
    file_.add(std::move(e));
  }
  file_.write();
}

void TeeReporter::Finalize() {
  console_.Finalize();
  file_.set_complete(true);
  file_.write();
}

std::string default_results_path(const std::string& root, const std::string& device_slug) {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return (fs::path(root) / device_slug / (std::string(buf) + ".json")).string();
}

nlohmann::json load_results(const std::string& path) {
  auto j = read_json_file(path, "results file");
  if (!j.is_object() || !j.contains("benchmarks") || !j.at("benchmarks").is_array())
    throw InputError("results file '" + path + "' has no \"benchmarks\" array: not a Google Benchmark / phasebench file");
  if (!j.contains("context") || !j.at("context").contains("phasebench"))
    throw InputError("results file '" + path +
                     "' has no context.phasebench: a plain Google Benchmark file, not written by phasebench");
  const auto& pb = j.at("context").at("phasebench");
  const auto& v = pb.contains("schema_version") ? pb.at("schema_version") : nlohmann::json();
  if (!v.is_number_integer() || v.get<int>() < kOldestReadableSchemaVersion || v.get<int>() > kResultsSchemaVersion)
    throw InputError("results file '" + path + "' has schema version " + (v.is_null() ? std::string("(none)") : v.dump()) +
                     "; this phasebench reads versions " + std::to_string(kOldestReadableSchemaVersion) + " to " +
                     std::to_string(kResultsSchemaVersion));
  return j;
}

}  // namespace phasebench
