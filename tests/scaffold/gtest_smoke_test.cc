// Smoke test: GoogleTest (Debian libgtest-dev) compiles, links and runs.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

TEST(GtestSmoke, SumsAVector) {
  std::vector<int> v{1, 2, 3, 4};
  EXPECT_EQ(std::accumulate(v.begin(), v.end(), 0), 10);
}
