#pragma once
// Starting the run's processes over MPI when mpirun or srun started several
// (phasebench/processes.hpp); built with MPI where CMake finds it.
#include <optional>
#include <string>

namespace phasebench {

// When the launcher started more than one rank: MPI's processes become the run's
// (MPI_Init). Why not, as one line, where this build has no MPI.
std::optional<std::string> start_processes(int* argc, char*** argv);
// Whether this build has MPI.
bool mpi_built();

}  // namespace phasebench
