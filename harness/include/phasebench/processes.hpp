#pragma once
// The processes of one run when mpirun or srun starts several (one rank a GPU,
// bench/mpi_processes.cpp over MPI): what the run, its sampling loop and the
// operations that span the ranks ask of the others. One process (the default):
// size 1, and every call returns its own argument.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace phasebench {

class Processes {
 public:
  virtual ~Processes() = default;
  virtual int size() const { return 1; }
  virtual int rank() const { return 0; }
  // The rank among those of its node (its GPU is that device of the node).
  virtual int local_rank() const { return 0; }
  // `bytes` at `data` from rank `root` to every rank.
  virtual void broadcast(void* data, std::size_t bytes, int root) {
    (void)data, (void)bytes, (void)root;
  }
  // The largest `v` of all ranks, on every rank.
  virtual double max(double v) { return v; }
  // Whether any rank's `v` is true, on every rank.
  virtual bool any(bool v) { return v; }
  // Element-wise sums over the ranks (the same length on each), on every rank.
  virtual void sum(std::vector<double>& v) { (void)v; }
  // Every rank's `mine`, in rank order, on every rank.
  virtual std::vector<std::string> all_gather(const std::string& mine) { return {mine}; }
  // Ends the processes' run (MPI_Finalize); and, on an error one rank alone
  // met, stops them all (MPI_Abort) with `status`, so none waits forever.
  virtual void finish() {}
  [[noreturn]] virtual void abort_all(int status);

  // The first non-empty `mine` in rank order (an error one rank met), on every rank.
  std::string first_of(const std::string& mine);
  // A point's outcome, the same on every rank: where any rank's `failed`, every
  // rank takes the first such rank's `status` and `message`. Whether any failed.
  bool first_failure(bool failed, std::string& status, std::string& message);
};

// This run's processes: one unless set_processes() was given MPI's.
Processes& processes();
void set_processes(std::unique_ptr<Processes> p);

// The ranks the launcher says it started (mpirun's OMPI_COMM_WORLD_SIZE, MPICH's
// or Slurm's PMI_SIZE, srun's SLURM_STEP_NUM_TASKS); 1 when none.
int launched_ranks();

}  // namespace phasebench
