// The results file (results.hpp): written by write-then-rename after every point,
// the console-and-file reporter, and the loader that checks a file before use.
#include "results.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "build_info.hpp"
#include "phasebench/error.hpp"
#include "phasebench/json_file.hpp"
#include "standing.hpp"

namespace phasebench {

namespace fs = std::filesystem;

namespace {

bool process_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

// What the signal handler needs, prepared beforehand: it may only call async-signal-safe
// functions (unlink, write, _exit), so no std::string is built there.
char g_lock[4096] = "";
char g_tmp[4096] = "";
char g_before_first_point[4096] = "";
char g_after_first_point[4096] = "";
volatile std::sig_atomic_t g_written = 0;  // the path holds this run's document

void on_interrupt(int sig) {
  if (g_tmp[0]) ::unlink(g_tmp);  // a write cut off mid-way
  if (g_lock[0]) ::unlink(g_lock);
  const char* m = g_written ? g_after_first_point : g_before_first_point;
  [[maybe_unused]] const auto n = ::write(2, m, std::strlen(m));
  _exit(128 + sig);
}

void copy_into(char (&dst)[4096], const std::string& src) { std::snprintf(dst, sizeof dst, "%s", src.c_str()); }

// SIGINT and SIGTERM held back while the file is renamed into place and the handler's
// flag follows it, so that the handler's line says what is on disk.
class SignalsHeld {
 public:
  SignalsHeld() {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &s, &old_);
  }
  ~SignalsHeld() { ::sigprocmask(SIG_SETMASK, &old_, nullptr); }
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;

 private:
  sigset_t old_;
};

}  // namespace

ResultsFile::ResultsFile(InMemory, nlohmann::json phasebench_context) : in_memory_(true) {
  doc_ = {{"context", nlohmann::json::object()}, {"benchmarks", nlohmann::json::array()}};
  doc_["context"]["phasebench"] = std::move(phasebench_context);
  doc_["context"]["phasebench"]["schema_version"] = kResultsSchemaVersion;
  doc_["context"]["phasebench"]["complete"] = false;
}

ResultsFile::ResultsFile(std::string path, nlohmann::json phasebench_context, bool overwrite)
    : path_(std::move(path)), lock_(path_ + ".lock"), tmp_(path_ + ".tmp") {
  doc_ = {{"context", nlohmann::json::object()}, {"benchmarks", nlohmann::json::array()}};
  doc_["context"]["phasebench"] = std::move(phasebench_context);
  doc_["context"]["phasebench"]["schema_version"] = kResultsSchemaVersion;
  doc_["context"]["phasebench"]["complete"] = false;
  std::error_code ec;
  const fs::path p(path_);
  if (path_.empty()) throw InputError("--out takes a file path, got ''");
  if (path_.back() == '/' || !p.has_filename() || p.filename() == "." || p.filename() == "..")
    throw InputError("--out " + quote_value(path_, 200) + " names a folder; give a file path, e.g. " +
                     quote_value((p.has_filename() ? p : p.parent_path()).string() + "/run.json", 200));
  const auto st = fs::symlink_status(p, ec);
  if (fs::is_directory(st)) throw InputError("--out " + quote_value(path_, 200) + " is a folder; give a file path");
  if (fs::is_symlink(st))
    throw InputError("--out " + quote_value(path_, 200) + " is a symbolic link; give the file's own path");
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw InputError("--out " + quote_value(path_, 200) +
                     " is not a regular file (a device, FIFO or socket); phasebench replaces its results file at "
                     "every point, so give the path of a file");
  existed_ = fs::exists(st);
  if (p.has_parent_path()) {
    fs::create_directories(p.parent_path(), ec);
    if (ec) throw InputError("cannot create the results folder '" + p.parent_path().string() + "': " + ec.message());
  }
  take_lock();  // before the existence check, so a running writer is named as such
  try {
    if (existed_ && !overwrite)
      throw InputError("results file " + quote_value(path_, 200) +
                       " already exists; give another --out, or --overwrite to replace it");
    // The destination is tried now, with the whole document, rather than after the measuring:
    // a folder that cannot be written or a full disk is an error before anything runs.
    write_to_path(true);
  } catch (...) {
    ::unlink(tmp_.c_str());
    ::unlink(lock_.c_str());
    locked_ = false;
    throw;
  }
}

ResultsFile::~ResultsFile() {
  if (handling_signals_) {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    g_lock[0] = g_tmp[0] = '\0';
  }
  if (locked_) ::unlink(lock_.c_str());
}

void ResultsFile::exit_cleanly_on_interrupt(const std::string& what) {
  if (in_memory_) return;  // nothing on disk to keep whole
  copy_into(g_lock, lock_);
  copy_into(g_tmp, tmp_);
  copy_into(g_after_first_point, "\nphasebench: interrupted; " + what + " of the finished points are in " + path_ +
                                     " (marked incomplete)\n");
  copy_into(g_before_first_point,
            "\nphasebench: interrupted before the first point finished; " +
                (existed_ ? path_ + " is unchanged (it is replaced only once a point of the new run has finished)\n"
                          : "nothing was measured and " + path_ + " was not written\n"));
  g_written = written_ ? 1 : 0;
  handling_signals_ = true;
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
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
  if (in_memory_) return;
  // Before the first point (or the end) there is nothing the old file, or no file, should give way to.
  const bool has_content = !doc_["benchmarks"].empty() || doc_["context"]["phasebench"]["complete"] == true;
  if (written_ || has_content) write_to_path(false);
}

void ResultsFile::write_to_path(bool trial) {
  // Write-then-rename: the file on disk is always a whole, valid document. A trial (the
  // constructor's) writes the temporary file only and removes it.
  {
    std::ofstream out(tmp_, std::ios::trunc);
    if (!out)
      throw InputError("cannot write results file " + quote_value(tmp_, 200) + ": " + std::strerror(errno) +
                       "; check the folder is writable");
    // error_handler_t::replace keeps the file valid even if a label held bad UTF-8.
    out << doc_.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    out.flush();
    if (!out) {
      out.close();
      ::unlink(tmp_.c_str());
      throw InputError("writing results file " + quote_value(tmp_, 200) + " failed (disk full?)");
    }
  }
  if (trial) {
    ::unlink(tmp_.c_str());
    return;
  }
  const SignalsHeld held;
  std::error_code ec;
  fs::rename(tmp_, path_, ec);
  if (ec) {
    ::unlink(tmp_.c_str());
    throw InputError("cannot move " + quote_value(tmp_, 200) + " to " + quote_value(path_, 200) + ": " + ec.message());
  }
  written_ = true;
  if (handling_signals_) g_written = 1;
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
  // As the library was compiled (what its own JSON reporter writes), not as this program was.
  const auto library = benchmark_library_build_type();
  j["library_build_type"] = library;
  file_.set_benchmark_context(std::move(j));
  file_.write();
  const bool ok = console_.ReportContext(c);
  if (library == "debug")
    std::cerr << "phasebench: note: that DEBUG warning is the Google Benchmark library's own build (Debian's: -O2, "
                 "its checks on); phasebench times each sample itself, outside the library (build.google_benchmark "
                 "in the results)\n";
  return ok;
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
  if (!j.contains("context") || !j.at("context").is_object() || !j.at("context").contains("phasebench") ||
      !j.at("context").at("phasebench").is_object())
    throw InputError("results file '" + path +
                     "' has no context.phasebench object: a plain Google Benchmark file, not written by phasebench");
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
