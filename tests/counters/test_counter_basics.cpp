// Each counter of the emulation's counting build proved on a kernel whose count is
// known by construction (counter_kernels.cu): coalesced and strided loads, vector
// and scalar accesses, a bank-conflicted transpose and its padded twin, divergence,
// a redundant re-read, atomics, barriers and collectives, bytes in flight,
// ldmatrix conflicts, cp.async; and the race check on planted races.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "counter_kernels.hpp"
#include "counting.hpp"
#include "emu_test_util.hpp"

namespace {

using pb_emu::counters::Launch;
using pb_emu_test::Dev;

class Counters : public pb_emu_test::EmuStreamTest {
 protected:
  void SetUp() override {
    EmuStreamTest::SetUp();
    ASSERT_TRUE(pb_emu::counters::available()) << pb_emu::counters::unavailable_reason();
  }
  // The launches `work` makes, counted.
  std::vector<Launch> count(const std::function<void(cudaStream_t)>& work) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    pb_emu::counters::begin();
    work(s_);
    const cudaError_t e = cudaStreamSynchronize(s_);
    auto launches = pb_emu::counters::end();
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    return launches;
  }
  Launch one(const std::function<void(cudaStream_t)>& work) {
    auto v = count(work);
    EXPECT_EQ(v.size(), 1u);
    return v.empty() ? Launch{} : v.front();
  }
};

TEST_F(Counters, CoalescedLoadsTakeFourSectorsPerWarp) {
  const int n = 2048;
  Dev<float> in(n), out(n);
  in.set(std::vector<float>(n, 1.f));
  const Launch L = one([&](cudaStream_t s) { pb_count_test::coalesced(in.p, out.p, n, s); });
  EXPECT_EQ(L.global_ld.requests, 64u);  // 2048 threads = 64 warps, one load each
  EXPECT_EQ(L.global_ld.sectors, 64u * 4);
  EXPECT_EQ(L.global_ld.ideal, 64u * 4);
  EXPECT_EQ(L.global_ld.lanes, 2048u);
  EXPECT_EQ(L.global_st.sectors, 64u * 4);
  EXPECT_EQ(L.unique_read, 2048u * 4);
  EXPECT_EQ(L.unique_written, 2048u * 4);
  EXPECT_EQ(L.sectors_read, 2048u * 4 / 32);
  ASSERT_EQ(L.buffers.size(), 2u);
  EXPECT_EQ(L.buffers[0].unique_read, 2048u * 4);
  EXPECT_EQ(L.buffers[1].unique_written, 2048u * 4);
}

TEST_F(Counters, StridedLoadsTakeASectorPerLane) {
  const int n = 1024, stride = 8;  // 32 bytes apart: every lane in its own sector
  Dev<float> in(n * stride), out(n);
  in.set(std::vector<float>(n * stride, 1.f));
  const Launch L = one([&](cudaStream_t s) { pb_count_test::strided(in.p, out.p, n, stride, s); });
  EXPECT_EQ(L.global_ld.requests, 32u);
  EXPECT_EQ(L.global_ld.sectors, 32u * 32);  // 32 sectors a request
  EXPECT_EQ(L.global_ld.ideal, 32u * 4);     // for 128 bytes
  EXPECT_EQ(L.unique_read, 1024u * 4);       // distinct bytes are still just the ones asked for
  EXPECT_EQ(L.sectors_read, 1024u);          // but every one of them costs a sector
}

TEST_F(Counters, AVectorLoadIsOneRequestOfSixteenBytesALane) {
  const int n = 512;
  Dev<uint4> in(n), out(n);
  in.set(std::vector<uint4>(n, uint4{1, 2, 3, 4}));
  const Launch L = one([&](cudaStream_t s) { pb_count_test::vectors(in.p, out.p, n, s); });
  EXPECT_EQ(L.global_ld.requests, 16u);  // one per warp, not four
  EXPECT_EQ(L.global_ld.bytes, 512u * 16);
  EXPECT_EQ(L.global_ld.sectors, 16u * 16);
  EXPECT_EQ(L.global_ld.ideal, 16u * 16);
  EXPECT_EQ(L.global_st.requests, 16u);
}

TEST_F(Counters, ScalarRunsPerLaneAreUncoalesced) {
  const int n = 4096;  // 1024 threads, each 4 scalar loads 16 bytes apart from its neighbour's
  Dev<float> in(n), out(n / 4);
  in.set(std::vector<float>(n, 1.f));
  const Launch L = one([&](cudaStream_t s) { pb_count_test::scalar_runs(in.p, out.p, n, s); });
  EXPECT_EQ(L.global_ld.requests, 32u * 4);
  EXPECT_EQ(L.global_ld.sectors, 32u * 4 * 16);  // a request spans 512 bytes for 128
  EXPECT_EQ(L.global_ld.ideal, 32u * 4 * 4);
  EXPECT_EQ(L.unique_read, 4096u * 4);
}

TEST_F(Counters, AColumnReadOfAnUnpaddedTileIsAThirtyTwoWayConflict) {
  Dev<float> in(1024), out(1024);
  in.set(std::vector<float>(1024, 2.f));
  const Launch bad = one([&](cudaStream_t s) { pb_count_test::transpose(in.p, out.p, false, s); });
  EXPECT_EQ(bad.shared_st.requests, 32u);
  EXPECT_EQ(bad.shared_st.sectors, 32u);  // row writes: one wavefront each
  EXPECT_EQ(bad.shared_ld.requests, 32u);
  EXPECT_EQ(bad.shared_ld.sectors, 32u * 32);  // column reads: 32 wavefronts each
  EXPECT_EQ(bad.shared_ld.ideal, 32u);
  const Launch good = one([&](cudaStream_t s) { pb_count_test::transpose(in.p, out.p, true, s); });
  EXPECT_EQ(good.shared_ld.sectors, 32u);
  EXPECT_EQ(good.shared_ld.ideal, 32u);
  ASSERT_FALSE(bad.wasteful_sites.empty());
  EXPECT_EQ(bad.wasteful_sites[0].kind, "shared ld");
  EXPECT_NE(bad.wasteful_sites[0].where.find("counter_kernels.cu"), std::string::npos) << bad.wasteful_sites[0].where;
}

TEST_F(Counters, ADivergentBranchHalvesTheActiveLanes) {
  const int n = 1024;
  Dev<float> in(n), out(n);
  in.set(std::vector<float>(n, 1.f));
  const Launch L = one([&](cudaStream_t s) { pb_count_test::divergent(in.p, out.p, n, s); });
  EXPECT_EQ(L.global_ld.requests, 32u);
  EXPECT_EQ(L.global_ld.lanes, 32u * 16);
  EXPECT_EQ(L.memory_lanes(), 2 * 32u * 16);
  EXPECT_EQ(L.memory_instructions(), 2 * 32u);
  EXPECT_EQ(L.global_ld.sectors, 32u * 4);  // odd lanes still touch all four sectors
  EXPECT_EQ(L.global_ld.ideal, 32u * 2);    // for 64 bytes
}

TEST_F(Counters, ARedundantReReadMovesMoreThanItsDistinctBytes) {
  const int n = 4096, blocks = 6;
  Dev<float> in(n), out(blocks);
  in.set(std::vector<float>(n, 1.f));
  const Launch L = one([&](cudaStream_t s) { pb_count_test::reread(in.p, out.p, n, blocks, s); });
  EXPECT_EQ(L.global_ld.bytes, static_cast<std::uint64_t>(blocks) * n * 4);
  EXPECT_EQ(L.unique_read, static_cast<std::uint64_t>(n) * 4);
  EXPECT_EQ(L.barriers, static_cast<std::uint64_t>(blocks) * 8);  // one __syncthreads x 8 warps a block
}

TEST_F(Counters, AtomicsAreCountedApart) {
  Dev<float> acc(8);
  acc.set(std::vector<float>(8, 0.f));
  const Launch L = one([&](cudaStream_t s) { pb_count_test::atomics(acc.p, s); });
  EXPECT_EQ(L.global_atom.requests, 8u);
  EXPECT_EQ(L.global_atom.lanes, 256u);
  EXPECT_EQ(L.global_atom.sectors, 8u);  // 8 floats in one sector, per request
  EXPECT_EQ(L.unique_written, 32u);
  EXPECT_EQ(L.global_ld.requests, 0u);
  EXPECT_EQ(acc.get(), std::vector<float>(8, 32.f));
}

TEST_F(Counters, BarriersAndCollectivesAreCountedPerWarp) {
  Dev<int> out(128);
  const Launch L = one([&](cudaStream_t s) { pb_count_test::syncs(out.p, s); });
  EXPECT_EQ(L.barriers, 3u * 4);
  EXPECT_EQ(L.shfl, 2u * 4);
  EXPECT_EQ(L.vote, 4u);
  EXPECT_EQ(L.syncwarp, 4u);
  EXPECT_EQ(L.collective_lanes, 4u * 4 * 32);
  EXPECT_EQ(L.blocks, 1u);
  EXPECT_EQ(L.warps, 4u);
}

TEST_F(Counters, BytesInFlightAreTheLoadsIssuedBeforeTheirUse) {
  Dev<float> in(8 * 256), out(256);
  in.set(std::vector<float>(8 * 256, 1.f));
  for (int loads : {1, 4, 8}) {
    SCOPED_TRACE("loads " + std::to_string(loads));
    const Launch L = one([&](cudaStream_t s) { pb_count_test::bursts(in.p, out.p, loads, s); });
    ASSERT_EQ(L.inflight_events, 256u);  // one stall point a thread: the shuffle
    EXPECT_DOUBLE_EQ(L.inflight_sum / static_cast<double>(L.inflight_events), 4.0 * loads);
    EXPECT_EQ(L.inflight_max, 4u * loads);
  }
}

TEST_F(Counters, LdmatrixRowsInTheSameBanksConflict) {
  Dev<std::uint16_t> in(256);
  Dev<unsigned> out(128);
  std::vector<std::uint16_t> h(256);
  for (int i = 0; i < 256; ++i) h[i] = static_cast<std::uint16_t>(i);
  in.set(h);
  struct Case {
    int row_bytes;
    std::uint64_t wavefronts;
  };
  for (const Case c : {Case{16, 4}, Case{128, 32}, Case{144, 4}}) {
    SCOPED_TRACE("rows " + std::to_string(c.row_bytes) + " bytes apart");
    const Launch L = one([&](cudaStream_t s) { pb_count_test::ldmatrix_rows(in.p, out.p, c.row_bytes, s); });
    EXPECT_EQ(L.ldsm.requests, 1u);
    EXPECT_EQ(L.ldsm.ideal, 4u);
    EXPECT_EQ(L.ldsm.sectors, c.wavefronts);
    // The 32 row stores: 16 bytes a lane, per quarter-warp; contiguous rows are conflict-free.
    EXPECT_EQ(L.shared_st.requests, 1u);
    if (c.row_bytes == 16) {
      EXPECT_EQ(L.shared_st.sectors, 4u);
    }
    EXPECT_EQ(out.get()[0], h[0] | static_cast<unsigned>(h[1]) << 16);  // ldmatrix still loads right
  }
}

TEST_F(Counters, CpAsyncCountsBothSidesAndItsCopiesInFlight) {
  const int tiles = 6;
  Dev<uint4> in(tiles * 32), out(tiles * 32);
  std::vector<uint4> h(tiles * 32);
  for (int i = 0; i < tiles * 32; ++i) h[i] = uint4{static_cast<unsigned>(i), 0, 0, 0};
  in.set(h);
  const Launch L = one([&](cudaStream_t s) { pb_count_test::cp_async_tiles(in.p, out.p, tiles, s); });
  EXPECT_EQ(L.ldgsts.requests, static_cast<std::uint64_t>(tiles));
  EXPECT_EQ(L.ldgsts.sectors, tiles * 16u);
  EXPECT_EQ(L.ldgsts.ideal, tiles * 16u);
  EXPECT_EQ(L.ldgsts_shared.sectors, tiles * 4u);  // 512 bytes: four wavefronts
  EXPECT_EQ(L.unique_read, tiles * 512u);
  EXPECT_GT(L.inflight_async_events, 0u);
  EXPECT_EQ(L.inflight_max, 32u);  // two 16-byte copies of a lane pending at its waits
  const auto o = out.get();
  for (int t = 0; t < tiles; ++t) EXPECT_EQ(o[t * 32].x, static_cast<unsigned>(t * 32 + 1)) << t;
}

// ---- the race check ----------------------------------------------------------------------

TEST_F(Counters, AMissingBarrierIsARace) {
  Dev<int> out(128);
  pb_count_test::race_missing_barrier(out.p, s_);
  expect_launch_failure("shared-memory race");
  pb_emu::reset_after_failure_for_tests();
  pb_count_test::no_race_barrier(out.p, s_);
  EXPECT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  EXPECT_EQ(out.get()[0], 3);
}

TEST_F(Counters, AMissingSyncwarpBeforeLdmatrixIsARace) {
  Dev<std::uint16_t> in(256);
  Dev<unsigned> out(128);
  in.set(std::vector<std::uint16_t>(256, 1));
  pb_count_test::race_missing_syncwarp(in.p, out.p, s_);
  const cudaError_t e = cudaStreamSynchronize(s_);
  ASSERT_EQ(e, cudaErrorLaunchFailure);
  const std::string msg = cudaGetErrorString(e);
  EXPECT_NE(msg.find("shared-memory race (read after write)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no __syncwarp naming both lanes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("counter_kernels.cu"), std::string::npos) << msg;  // both source lines are named
  pb_emu::reset_after_failure_for_tests();
  pb_count_test::no_race_syncwarp(in.p, out.p, s_);
  EXPECT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
}

TEST_F(Counters, ACpAsyncIntoABufferStillBeingReadIsARace) {
  Dev<uint4> in(64), out(64);
  in.set(std::vector<uint4>(64, uint4{7, 7, 7, 7}));
  pb_count_test::race_cp_async_in_use(in.p, out.p, s_);
  // Which of the race's two accesses the fiber order meets second decides the
  // message's wording (the copy after a read, or a read after the copy landed).
  const cudaError_t e = cudaStreamSynchronize(s_);
  ASSERT_EQ(e, cudaErrorLaunchFailure);
  const std::string msg = cudaGetErrorString(e);
  EXPECT_NE(msg.find("shared-memory race"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cp_async_16"), std::string::npos) << msg;
  pb_emu::reset_after_failure_for_tests();
  pb_count_test::no_race_cp_async(in.p, out.p, s_);
  EXPECT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
}

// Several lanes storing to one word in one warp-wide store is defined (one lane's value
// lands); the same store site reached by lanes in different loop iterations is two
// stores, unordered without a __syncwarp.
TEST_F(Counters, OneStoreInstructionToOneWordIsNoRaceButStoresOfOtherIterationsAre) {
  Dev<int> out(32);
  pb_count_test::race_same_word_other_iterations(out.p, s_);
  const cudaError_t e = cudaStreamSynchronize(s_);
  ASSERT_EQ(e, cudaErrorLaunchFailure);
  const std::string msg = cudaGetErrorString(e);
  EXPECT_NE(msg.find("shared-memory race (write after write)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("counter_kernels.cu"), std::string::npos) << msg;
  pb_emu::reset_after_failure_for_tests();
  pb_count_test::no_race_same_word_one_instruction(out.p, s_);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  const auto o = out.get();
  for (int lane = 0; lane < 32; ++lane) {
    const int w = lane % 12;
    EXPECT_EQ(o[lane], w < 8 ? w * 10 : w - 8) << lane;
  }
}

TEST_F(Counters, NothingIsRecordedOutsideAWindow) {
  Dev<float> in(256), out(256);
  in.set(std::vector<float>(256, 1.f));
  pb_count_test::coalesced(in.p, out.p, 256, s_);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  pb_emu::counters::begin();
  EXPECT_TRUE(pb_emu::counters::end().empty());
}

TEST_F(Counters, CopiesAndMemsetsAreRecordedWithTheirBytes) {
  Dev<float> a(1000), b(1000);
  const auto v = count([&](cudaStream_t s) {
    cudaMemsetAsync(a.p, 0, 4000, s);
    cudaMemcpyAsync(b.p, a.p, 4000, cudaMemcpyDeviceToDevice, s);
  });
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].kind, "memset");
  EXPECT_EQ(v[0].copy_bytes_written, 4000u);
  EXPECT_EQ(v[1].kind, "copy");
  EXPECT_EQ(v[1].copy_bytes_read, 4000u);
  EXPECT_EQ(v[1].copy_bytes_written, 4000u);
}

}  // namespace
