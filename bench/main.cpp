// The phasebench program: dispatches to a subcommand (commands.hpp); any error that
// reaches here is one line and a non-zero exit status, never a crash. Started by
// mpirun or srun as several ranks, `run` starts MPI first (mpi_processes.hpp).
#include <exception>
#include <iostream>
#include <string>

#include "commands.hpp"
#include "mpi_processes.hpp"
#include "phasebench/processes.hpp"

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "run")
    if (auto why = phasebench::start_processes(&argc, &argv)) {
      std::cerr << "phasebench: error: " << *why << "\n";
      return 2;
    }
  auto& procs = phasebench::processes();
  int status = 1;
  try {
    status = phasebench::phasebench_main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "phasebench: error: " << e.what() << "\n";
    // One rank's error: the others may be waiting for it in a collective.
    if (procs.size() > 1) procs.abort_all(1);
  }
  procs.finish();
  return status;
}
