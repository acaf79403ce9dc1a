// The run's processes (phasebench/processes.hpp): how many ranks a launcher says it
// started (mpirun's, MPICH's or Slurm's variables; none: one), and the one-process
// defaults every call falls back to.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "phasebench/processes.hpp"

using namespace phasebench;

namespace {

// Sets the launchers' variables for one test, and clears them after.
class LauncherEnv {
 public:
  LauncherEnv() { clear(); }
  ~LauncherEnv() { clear(); }
  static void clear() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) unsetenv(v);
  }
};

}  // namespace

TEST(Processes, TheLaunchersRankCount) {
  LauncherEnv env;
  EXPECT_EQ(launched_ranks(), 1);
  setenv("SLURM_STEP_NUM_TASKS", "16", 1);
  EXPECT_EQ(launched_ranks(), 16);
  setenv("PMI_SIZE", "4", 1);
  EXPECT_EQ(launched_ranks(), 4);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_EQ(launched_ranks(), 2);  // mpirun's own first
  setenv("OMPI_COMM_WORLD_SIZE", "x", 1);
  EXPECT_EQ(launched_ranks(), 4);  // not a count: the next variable's
}

TEST(Processes, OneProcessByDefault) {
  Processes& p = processes();
  EXPECT_EQ(p.size(), 1);
  EXPECT_EQ(p.rank(), 0);
  EXPECT_EQ(p.local_rank(), 0);
  EXPECT_DOUBLE_EQ(p.max(2.5), 2.5);
  EXPECT_TRUE(p.any(true));
  EXPECT_FALSE(p.any(false));
  std::vector<double> v{1, 2};
  p.sum(v);
  EXPECT_EQ(v, (std::vector<double>{1, 2}));
  EXPECT_EQ(p.all_gather("a"), std::vector<std::string>{"a"});
  EXPECT_EQ(p.first_of(""), "");
  EXPECT_EQ(p.first_of("wrong"), "wrong");
}
