// The overhead check compares the two timing paths round by round, so drift of
// the machine between rounds is not read as harness distortion.
#include <gtest/gtest.h>

#include <stdexcept>

#include "overhead.hpp"

using namespace phasebench;

TEST(Overhead, DriftBetweenRoundsCancels) {
  // The machine slows down 10% per round; the harness adds 1% in every round.
  std::vector<OverheadRound> rounds;
  double t = 10e-3;
  for (int i = 0; i < 6; ++i, t *= 1.10) rounds.push_back({t, {t * 1.01, t * 1.01, t * 1.01}});
  const auto c = compare_overhead(rounds);
  EXPECT_NEAR(c.paired_difference, 0.01, 1e-12);
  EXPECT_NEAR(c.spread, 0.0, 1e-12);
  EXPECT_EQ(c.rounds, 6u);
  EXPECT_EQ(c.samples, 18u);
  // The medians of each path over all rounds (what is printed beside it).
  EXPECT_NEAR(c.bare_median, 0.5 * (10e-3 * 1.1 * 1.1 + 10e-3 * 1.1 * 1.1 * 1.1), 1e-12);
}

TEST(Overhead, ADistortingHarnessShows) {
  std::vector<OverheadRound> rounds = {{1e-3, {1.05e-3, 1.05e-3}}, {2e-3, {2.1e-3, 2.1e-3}}, {1e-3, {1.05e-3}}};
  EXPECT_NEAR(compare_overhead(rounds).paired_difference, 0.05, 1e-12);
}

TEST(Overhead, RefusesEmptyInput) {
  EXPECT_THROW(compare_overhead({}), std::invalid_argument);
  EXPECT_THROW(compare_overhead({{1e-3, {}}}), std::invalid_argument);
  EXPECT_THROW(compare_overhead({{0.0, {1e-3}}}), std::invalid_argument);
  EXPECT_THROW(compare_overhead({{1e-3, {-1.0}}}), std::invalid_argument);
}
