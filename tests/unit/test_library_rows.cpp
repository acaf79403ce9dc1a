// The attention libraries' rows in the sweep (issue 28): implementation names, the
// points a backend with FlashInfer rows gets (named impl:flashinfer beside our own,
// which keep their names), --impl choosing among them, the warning of a backend that
// has none, and --impl's bad input through the binary.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cli_test_util.hpp"
#include "phasebench/op.hpp"
#include "phasebench/ops/decode_attention.hpp"
#include "phasebench/ops/prefill_attention.hpp"
#include "sweep.hpp"

namespace phasebench {
namespace {

TEST(LibraryRows, ImplNamesRoundTrip) {
  for (Impl i : kAllImpls) EXPECT_EQ(impl_named(to_string(i)), i) << to_string(i);
  EXPECT_EQ(to_string(Impl::flashinfer), "flashinfer");
  EXPECT_EQ(to_string(Impl::cudnn), "cudnn");
  EXPECT_FALSE(impl_named("FlashInfer").has_value());
  EXPECT_FALSE(impl_named("").has_value());
}

// The CPU backend's device, ceilings and ops, but answering as a CUDA build with
// FlashInfer's paged-decode and prefill rows would (its implements()).
class LibraryBackend : public Backend {
 public:
  LibraryBackend() : cpu_(make_cpu_backend()) {}
  const DeviceInfo& device() const override { return cpu_->device(); }
  Ceilings ceilings() const override { return cpu_->ceilings(); }
  void measure_ceilings(const std::vector<DType>& t) override { cpu_->measure_ceilings(t); }
  bool implements(std::string_view kind, DType t, Impl impl) const override {
    if (impl == Impl::flashinfer) return kind == kDecodeAttentionPaged || kind == kPrefillAttention;
    return cpu_->implements(kind, t, impl);
  }
  bool applies(const OpRequest& r) const override { return r.impl == Impl::flashinfer || cpu_->applies(r); }
  std::optional<std::string> cannot_run(const OpRequest& r) const override { return cpu_->cannot_run(r); }
  std::unique_ptr<PreparedOp> prepare(const OpRequest& r) override { return cpu_->prepare(r); }
  Sample time(PreparedOp& op, const TimingOptions& o) override { return cpu_->time(op, o); }
  void synchronize() override {}
  void profile(PreparedOp&, const std::string&) override {}

 private:
  std::unique_ptr<Backend> cpu_;
};

std::vector<Point> sweep(Backend& b, std::set<std::string> groups, std::set<Impl> impls = {},
                         std::vector<std::string>* warnings = nullptr) {
  SweepConfig c;
  c.groups = std::move(groups);
  c.impls = std::move(impls);
  apply_defaults(c, b);
  return build_sweep(c, b, warnings);
}

std::size_t count_impl(const std::vector<Point>& pts, Impl i) {
  return static_cast<std::size_t>(
      std::count_if(pts.begin(), pts.end(), [&](const Point& p) { return p.request.impl == i; }));
}

TEST(LibraryRows, DecodeAttentionGetsALibraryRowBesideOurs) {
  LibraryBackend b;
  const auto pts = sweep(b, {"decode_attention"});
  std::size_t paged_own = 0, paged_fi = 0;
  for (const auto& p : pts) {
    const bool paged = p.request.kind == kDecodeAttentionPaged;
    if (p.request.impl == Impl::own) {
      EXPECT_EQ(p.name.find("impl:"), std::string::npos) << "our own rows keep their names: " << p.name;
      paged_own += paged;
    } else {
      EXPECT_EQ(p.request.impl, Impl::flashinfer) << p.name;
      EXPECT_TRUE(paged) << "the backend has FlashInfer rows of the paged kind only: " << p.name;
      EXPECT_NE(p.name.find("/impl:flashinfer"), std::string::npos) << p.name;
      ++paged_fi;
    }
  }
  EXPECT_GT(paged_own, 0u);
  EXPECT_EQ(paged_fi, paged_own) << "every paged point of ours has FlashInfer's beside it";
  std::set<std::string> names;
  for (const auto& p : pts) EXPECT_TRUE(names.insert(p.name).second) << "duplicate name " << p.name;
}

TEST(LibraryRows, ImplChoosesWhichRowsRun) {
  LibraryBackend b;
  const auto own = sweep(b, {"decode_attention", "prefill_attention"}, {Impl::own});
  EXPECT_EQ(count_impl(own, Impl::flashinfer), 0u);
  EXPECT_GT(count_impl(own, Impl::own), 0u);
  const auto fi = sweep(b, {"decode_attention", "prefill_attention", "decode_attention_multi", "kv_append"},
                        {Impl::flashinfer});
  EXPECT_GT(count_impl(fi, Impl::flashinfer), 0u);
  EXPECT_EQ(fi.size(), count_impl(fi, Impl::flashinfer)) << "groups that time ours alone make no points";
  const auto all = sweep(b, {"prefill_attention"});
  EXPECT_GT(count_impl(all, Impl::flashinfer), 0u);
  EXPECT_GT(count_impl(all, Impl::own), 0u);
}

TEST(LibraryRows, ABackendWithoutThemSaysWhy) {
  auto cpu = make_cpu_backend();
  std::vector<std::string> w;
  const auto pts = sweep(*cpu, {"decode_attention"}, {}, &w);
  EXPECT_EQ(count_impl(pts, Impl::flashinfer), 0u);
  const auto says = [&](const std::string& what) {
    return std::any_of(w.begin(), w.end(), [&](const std::string& s) { return s.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(says("no flashinfer rows of decode_attention")) << ::testing::PrintToString(w);
  EXPECT_TRUE(says("no cudnn rows")) << ::testing::PrintToString(w);
  EXPECT_TRUE(says("the cpu backend has none")) << ::testing::PrintToString(w);
  // Left out on purpose (--impl own): nothing to say. Groups without library rows: nothing either.
  std::vector<std::string> quiet;
  sweep(*cpu, {"decode_attention"}, {Impl::own}, &quiet);
  sweep(*cpu, {"kv_append"}, {}, &quiet);
  EXPECT_TRUE(quiet.empty()) << ::testing::PrintToString(quiet);
}

TEST(LibraryRows, BadImplIsOneLineAndStatus2) {
  const auto r = test::run_cli("run --backend=cpu --ops decode_attention --impl own,flashinfr --no-calibrate");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--impl: unknown implementation 'flashinfr'"), std::string::npos) << r.out;
  EXPECT_LE(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  const auto empty = test::run_cli("run --backend=cpu --ops decode_attention --impl own, --no-calibrate");
  EXPECT_EQ(empty.status, 2) << empty.out;
  EXPECT_NE(empty.out.find("--impl"), std::string::npos) << empty.out;
}

}  // namespace
}  // namespace phasebench
