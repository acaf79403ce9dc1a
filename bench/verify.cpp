// `phasebench run --verify-only` (see verify.hpp): prepare, verify, report; never time.
#include "verify.hpp"

#include <fmt/format.h>

#include <chrono>
#include <ostream>
#include <regex>

#include "phasebench/error.hpp"
#include "phasebench/processes.hpp"

namespace phasebench {

std::vector<const Point*> select_points(const std::vector<Point>& points, const std::string& filter) {
  const bool negative = !filter.empty() && filter[0] == '-';
  const std::string pattern = negative ? filter.substr(1) : (filter.empty() ? std::string(".") : filter);
  std::regex re;
  try {
    re = std::regex(pattern);
  } catch (const std::regex_error& e) {
    throw InputError("--benchmark_filter: '" + pattern + "' is not a valid regular expression (" + e.what() + ")");
  }
  std::vector<const Point*> out;
  for (const auto& p : points)
    if (std::regex_search(p.name, re) != negative) out.push_back(&p);
  return out;
}

VerifyCounts verify_points(Backend& backend, const std::vector<const Point*>& points, std::ostream& out) {
  VerifyCounts c;
  const std::size_t n = points.size();
  const int width = static_cast<int>(std::to_string(n).size());
  out << "verifying " << n << " point(s) against their references; nothing is timed\n";
  for (std::size_t i = 0; i < n; ++i) {
    const Point& p = *points[i];
    const auto t0 = std::chrono::steady_clock::now();
    std::string status, detail;
    // Under mpirun the ranks agree on every point (as the fixture does): skipped by
    // all when any rank cannot run it, and the first rank's outcome when any fails.
    Processes& procs = processes();
    const bool lockstep = procs.size() > 1;
    try {
      if (!p.invalid.empty()) throw Unsupported(p.invalid);
      std::string why = backend.cannot_run(p.request).value_or("");
      if (lockstep) why = procs.first_of(why);
      if (!why.empty()) throw Unsupported(why);
      auto op = backend.prepare(p.request);
      op->verify();
      status = "ok";
    } catch (const Unsupported& e) {
      status = "skipped";
      detail = e.what();
    } catch (const VerificationError& e) {
      status = "WRONG";
      detail = e.what();
    } catch (const std::exception& e) {
      status = "ERROR";
      detail = e.what();
    }
    if (lockstep) procs.first_failure(status != "ok", status, detail);
    (status == "ok" ? c.ok : status == "skipped" ? c.skipped : status == "WRONG" ? c.wrong : c.errors)++;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out << fmt::format("[{:>{}}/{}] {:<7} {} ({:.1f} s){}{}\n", i + 1, width, n, status, p.name, s,
                       detail.empty() ? "" : ": ", detail)
        << std::flush;
  }
  out << fmt::format("verified {} point(s): {} ok, {} wrong, {} skipped, {} errors\n", n, c.ok, c.wrong, c.skipped,
                     c.errors);
  return c;
}

}  // namespace phasebench
