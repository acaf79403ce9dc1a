// The results file (results.hpp): written by write-then-rename after every point,
// the console-and-file reporter, and the loader that checks a file before use.
#include "results.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "phasebench/error.hpp"
#include "phasebench/json_file.hpp"
#include "standing.hpp"

namespace phasebench {

namespace fs = std::filesystem;

namespace {

bool process_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

}  // namespace

ResultsFile::ResultsFile(std::string path, nlohmann::json phasebench_context, bool overwrite)
    : path_(std::move(path)), lock_(path_ + ".lock") {
  doc_ = {{"context", nlohmann::json::object()}, {"benchmarks", nlohmann::json::array()}};
  doc_["context"]["phasebench"] = std::move(phasebench_context);
  doc_["context"]["phasebench"]["schema_version"] = kResultsSchemaVersion;
  doc_["context"]["phasebench"]["complete"] = false;
  std::error_code ec;
  const fs::path p(path_);
  const auto st = fs::symlink_status(p, ec);
  if (fs::is_directory(st)) throw InputError("--out " + quote_value(path_, 200) + " is a folder; give a file path");
  if (fs::is_symlink(st))
    throw InputError("--out " + quote_value(path_, 200) + " is a symbolic link; give the file's own path");
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw InputError("--out " + quote_value(path_, 200) +
                     " is not a regular file (a device, FIFO or socket); phasebench replaces its results file at "
                     "every point, so give the path of a file");
  if (p.has_parent_path()) {
    fs::create_directories(p.parent_path(), ec);
    if (ec) throw InputError("cannot create the results folder '" + p.parent_path().string() + "': " + ec.message());
  }
  take_lock();  // before the existence check, so a running writer is named as such
  try {
    if (fs::exists(st) && !overwrite)
      throw InputError("results file " + quote_value(path_, 200) +
                       " already exists; give another --out, or --overwrite to replace it");
    write();
  } catch (...) {
    ::unlink(lock_.c_str());
    locked_ = false;
    throw;
  }
}

ResultsFile::~ResultsFile() {
  if (locked_) ::unlink(lock_.c_str());
}

void ResultsFile::take_lock() {
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(lock_.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
      const std::string who = std::to_string(::getpid()) + "\n";
      [[maybe_unused]] const auto n = ::write(fd, who.data(), who.size());
      ::close(fd);
      locked_ = true;
      return;
    }
    if (errno != EEXIST)
      throw InputError("cannot create the lock " + quote_value(lock_, 200) + " beside the results file: " +
                       std::strerror(errno));
    long pid = 0;
    std::ifstream(lock_) >> pid;
    if (process_alive(pid))
      throw InputError("results file " + quote_value(path_, 200) + " is being written by another phasebench run (pid " +
                       std::to_string(pid) + ", lock " + quote_value(lock_, 200) + "); wait for it or give another --out");
    ::unlink(lock_.c_str());  // its run died (killed): the lock is stale
  }
  throw InputError("cannot take the lock " + quote_value(lock_, 200) + " beside the results file");
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

TeeReporter::TeeReporter(ResultsFile& file, const BenchContext& ctx, std::size_t expected_runs, bool progress)
    : file_(file), ctx_(ctx), expected_(expected_runs), progress_(progress) {
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

void TeeReporter::ReportRuns(const std::vector<Run>& reports_in) {
  // Under the noise rule each point is registered with one iteration (fixture.cpp),
  // which Google Benchmark writes into the name ("/iterations:1"); a point's name
  // is the same whatever rule timed it.
  std::vector<Run> reports = reports_in;
  for (auto& r : reports) r.run_name.iterations.clear();
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
    if (r.run_type == Run::RT_Iteration) ++done_;
    file_.add(std::move(e));
  }
  file_.write();
  report_progress();
}

namespace {

std::string duration_text(double s) {
  const auto t = static_cast<long long>(s + 0.5);
  if (t >= 3600) return std::to_string(t / 3600) + "h" + (t % 3600 / 60 < 10 ? "0" : "") + std::to_string(t % 3600 / 60) + "m";
  if (t >= 60) return std::to_string(t / 60) + "m" + (t % 60 < 10 ? "0" : "") + std::to_string(t % 60) + "s";
  return std::to_string(t) + "s";
}

}  // namespace

std::string progress_line(std::size_t done, std::size_t total, double elapsed_s) {
  std::string s = std::to_string(done) + "/" + std::to_string(total) + " runs, " + duration_text(elapsed_s) + " elapsed";
  if (done > 0 && total > done) s += ", about " + duration_text(elapsed_s / static_cast<double>(done) * static_cast<double>(total - done)) + " left";
  return s;
}

void TeeReporter::report_progress() {
  if (!progress_ || expected_ == 0) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::cerr << "phasebench: " << progress_line(done_, expected_, elapsed) << "\n";
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
  const fs::path dir = fs::path(root) / device_slug;
  std::string path = (dir / (std::string(buf) + ".json")).string();
  std::error_code ec;
  for (int n = 2; fs::exists(path, ec) || fs::exists(path + ".lock", ec); ++n)
    path = (dir / (std::string(buf) + "-" + std::to_string(n) + ".json")).string();
  return path;
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
  upgrade_names(j);
  return j;
}

}  // namespace phasebench
