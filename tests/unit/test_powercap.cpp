// The RAPL powercap reader on fake sysfs trees: package domains summed,
// subdomains left out, the counter's wrap carried, and "not available" with
// the reason where there is no counter (as on this project's CI machines).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cpu/powercap.hpp"

namespace fs = std::filesystem;
using phasebench::cpu::PowercapEnergy;

namespace {

struct FakeTree {
  fs::path root = fs::temp_directory_path() / ("pb-powercap-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                               "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  FakeTree() { fs::remove_all(root); }
  ~FakeTree() { fs::remove_all(root); }
  void domain(const std::string& dir, const std::string& name, std::uint64_t uj, std::uint64_t range) {
    fs::create_directories(root / dir);
    std::ofstream(root / dir / "name") << name << "\n";
    std::ofstream(root / dir / "max_energy_range_uj") << range << "\n";
    set(dir, uj);
  }
  void set(const std::string& dir, std::uint64_t uj) { std::ofstream(root / dir / "energy_uj") << uj << "\n"; }
};

}  // namespace

TEST(Powercap, SumsPackagesAndCarriesTheWrap) {
  FakeTree t;
  t.domain("intel-rapl:0", "package-0", 1000000, 262143328850);
  t.domain("intel-rapl:1", "package-1", 5000000, 262143328850);
  t.domain("intel-rapl:0:0", "core", 7, 262143328850);  // a part of package-0: not added again
  PowercapEnergy e(t.root.string());
  ASSERT_TRUE(e.available()) << e.why_unavailable();
  EXPECT_NE(e.describe().find("package-0 (intel-rapl:0)"), std::string::npos) << e.describe();
  EXPECT_EQ(e.describe().find("core"), std::string::npos);
  double j = -1;
  std::string err;
  ASSERT_TRUE(e.read(j, err)) << err;
  EXPECT_DOUBLE_EQ(j, 0);  // joules since the reader was made
  t.set("intel-rapl:0", 3000000);   // +2 J
  t.set("intel-rapl:1", 5500000);   // +0.5 J
  t.set("intel-rapl:0:0", 999999999);
  ASSERT_TRUE(e.read(j, err)) << err;
  EXPECT_DOUBLE_EQ(j, 2.5);
  // package-1 wraps: from 262143328850 - 1000000 round to 4000000 is 5 J.
  t.set("intel-rapl:1", 262143328850 - 1000000);
  ASSERT_TRUE(e.read(j, err));
  const double before = j;
  t.set("intel-rapl:1", 4000000);
  ASSERT_TRUE(e.read(j, err));
  EXPECT_NEAR(j - before, 5.0, 1e-9);
}

TEST(Powercap, NotAvailableSaysWhy) {
  PowercapEnergy none("/nonexistent/powercap");
  EXPECT_FALSE(none.available());
  EXPECT_NE(none.why_unavailable().find("not available: no /nonexistent/powercap"), std::string::npos);
  double j = 0;
  std::string err;
  EXPECT_FALSE(none.read(j, err));
  EXPECT_EQ(err, none.why_unavailable());

  FakeTree t;
  fs::create_directories(t.root / "dtpm");  // a powercap tree without RAPL
  PowercapEnergy no_rapl(t.root.string());
  EXPECT_NE(no_rapl.why_unavailable().find("no RAPL package domain"), std::string::npos);

  t.domain("intel-rapl:0", "package-0", 1, 100);
  fs::remove(t.root / "intel-rapl:0" / "energy_uj");  // as when only root may read it
  PowercapEnergy unreadable(t.root.string());
  EXPECT_FALSE(unreadable.available());
  EXPECT_NE(unreadable.why_unavailable().find("cannot read"), std::string::npos) << unreadable.why_unavailable();
}
