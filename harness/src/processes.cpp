// The run's processes (phasebench/processes.hpp): one by default.
#include "phasebench/processes.hpp"

#include <cstdlib>
#include <string>

namespace phasebench {

namespace {
std::unique_ptr<Processes>& slot() {
  static std::unique_ptr<Processes> p = std::make_unique<Processes>();
  return p;
}
}  // namespace

void Processes::abort_all(int status) { std::exit(status); }

std::string Processes::first_of(const std::string& mine) {
  for (auto& s : all_gather(mine))
    if (!s.empty()) return s;
  return {};
}

bool Processes::first_failure(bool failed, std::string& status, std::string& message) {
  const std::string first = first_of(failed ? status + "\n" + message : std::string());
  if (first.empty()) return false;
  const auto nl = first.find('\n');
  status = first.substr(0, nl);
  message = first.substr(nl + 1);
  return true;
}

Processes& processes() { return *slot(); }

void set_processes(std::unique_ptr<Processes> p) { slot() = p ? std::move(p) : std::make_unique<Processes>(); }

int launched_ranks() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"})
    if (const char* v = std::getenv(var); v && *v) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  return 1;
}

}  // namespace phasebench
