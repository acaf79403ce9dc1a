// The run's processes over MPI (phasebench/processes.hpp): MPI_COMM_WORLD's ranks,
// the local rank from the node's shared-memory communicator, and the few
// collectives the run needs (broadcast, max, any, sums, gathers of text).
#include "mpi_processes.hpp"

#include <cstdlib>
#include <memory>
#include <vector>

#include "phasebench/processes.hpp"

#if PHASEBENCH_HAVE_MPI
#include <mpi.h>
#endif

namespace phasebench {

#if PHASEBENCH_HAVE_MPI
namespace {

class MpiProcesses final : public Processes {
 public:
  MpiProcesses(int* argc, char*** argv) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank_);
    MPI_Comm_free(&node);
  }
  ~MpiProcesses() override { finish(); }

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  int local_rank() const override { return local_rank_; }
  void broadcast(void* data, std::size_t bytes, int root) override {
    MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD);
  }
  double max(double v) override {
    double out = v;
    MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return out;
  }
  bool any(bool v) override {
    int in = v ? 1 : 0, out = 0;
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    return out != 0;
  }
  void sum(std::vector<double>& v) override {
    MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  }
  std::vector<std::string> all_gather(const std::string& mine) override {
    const int len = static_cast<int>(mine.size());
    std::vector<int> lens(static_cast<std::size_t>(size_)), at(static_cast<std::size_t>(size_));
    MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD);
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      at[static_cast<std::size_t>(r)] = total;
      total += lens[static_cast<std::size_t>(r)];
    }
    std::string all(static_cast<std::size_t>(total), '\0');
    MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), at.data(), MPI_CHAR, MPI_COMM_WORLD);
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r)
      out.push_back(all.substr(static_cast<std::size_t>(at[static_cast<std::size_t>(r)]),
                               static_cast<std::size_t>(lens[static_cast<std::size_t>(r)])));
    return out;
  }
  void finish() override {
    if (finished_) return;
    finished_ = true;
    MPI_Finalize();
  }
  [[noreturn]] void abort_all(int status) override {
    MPI_Abort(MPI_COMM_WORLD, status);
    std::exit(status);
  }

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  bool finished_ = false;
};

}  // namespace

bool mpi_built() { return true; }

std::optional<std::string> start_processes(int* argc, char*** argv) {
  const int launched = launched_ranks();
  if (launched <= 1) return std::nullopt;
  auto mpi = std::make_unique<MpiProcesses>(argc, argv);
  if (mpi->size() != launched) {
    const std::string why = "the launcher started " + std::to_string(launched) + " ranks but MPI sees " +
                            std::to_string(mpi->size()) + ": this phasebench's MPI is not the launcher's (build with the "
                            "MPI that mpirun or srun belongs to)";
    mpi->finish();
    return why;
  }
  set_processes(std::move(mpi));
  return std::nullopt;
}
#else
bool mpi_built() { return false; }

std::optional<std::string> start_processes(int*, char***) {
  const int n = launched_ranks();
  if (n <= 1) return std::nullopt;
  return "started as one of " + std::to_string(n) +
         " ranks (mpirun or srun), but this phasebench was built without MPI, so every rank would run the whole sweep "
         "alone; install Open MPI (scripts/setup does) and rebuild";
}
#endif

}  // namespace phasebench
