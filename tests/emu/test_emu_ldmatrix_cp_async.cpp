// The emulation of ldmatrix and cp.async (kernels/cuda_emu/ptx.cpp) against the
// PTX ISA: every lane's registers of ldmatrix.m8n8 (.x1/.x2/.x4, with and without
// .trans) checked against the ISA's fragment table, written here independently of
// the emulation and of any kernel; cp.async's groups, zero fill and the misuse the
// ISA rules out (misaligned addresses, src-size > cp-size, a destination outside
// shared memory) failing the launch with a message.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "emu_async_kernels.hpp"
#include "emu_test_util.hpp"

namespace {

using pb_emu_test::Dev;
using EmuAsync = pb_emu_test::EmuStreamTest;

// PTX ISA, ldmatrix, "Figure: ldmatrix fragment layout" for .m8n8 / .b16: each
// lane holds two consecutive elements of one row of each matrix (row = lane / 4,
// elements 2 * (lane % 4) and + 1, the first in the low half); .trans delivers the
// matrix transposed, i.e. element [row][col] of the non-transposed table is read
// from [col][row].
TEST_F(EmuAsync, LdmatrixGivesEveryLaneTheIsaFragment) {
  std::vector<std::uint16_t> tile(256);
  for (int i = 0; i < 256; ++i) tile[i] = static_cast<std::uint16_t>(0x1000 + i);  // all distinct
  Dev<std::uint16_t> dt(256);
  dt.set(tile);
  Dev<unsigned> out(32 * 4);
  // Matrix i of the load is the tile's 8x8 block at rows (i % 2) * 8, columns (i / 2) * 8.
  auto element = [&](int i, int r, int c) -> unsigned { return tile[((i % 2) * 8 + r) * 16 + (i / 2) * 8 + c]; };
  for (int num : {1, 2, 4})
    for (bool trans : {false, true}) {
      pb_emu_test::ldmatrix(dt.p, num, trans, out.p, s_);
      ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess) << cudaGetErrorString(cudaStreamSynchronize(s_));
      const auto r = out.get();
      for (int lane = 0; lane < 32; ++lane) {
        const int row = lane / 4, col = 2 * (lane % 4);
        for (int i = 0; i < 4; ++i) {
          unsigned want = 0xdeadbeefu;
          if (i < num)
            want = trans ? element(i, col, row) | element(i, col + 1, row) << 16
                         : element(i, row, col) | element(i, row, col + 1) << 16;
          EXPECT_EQ(r[lane * 4 + i], want) << "x" << num << (trans ? ".trans" : "") << " lane " << lane
                                           << " register " << i;
        }
      }
    }
}

TEST_F(EmuAsync, LdmatrixMisalignedRowFails) {
  pb_emu_test::ldmatrix_misaligned(s_);
  expect_launch_failure("misaligned .shared address");
}

TEST_F(EmuAsync, LdmatrixGivenAGenericAddressFails) {
  pb_emu_test::ldmatrix_generic_address(s_);
  expect_launch_failure("is not in this block's shared memory");
}

// PTX ISA, cp.async / commit_group / wait_group: wait_group N completes every
// committed group but the newest N; copies not yet committed are not waited for;
// src-size bytes are read and the rest of cp-size zero-filled. The emulation
// completes a copy at the latest moment the ISA allows (when a wait covers it), so
// reading before the wait sees the old contents: a missing wait fails verification.
TEST_F(EmuAsync, CpAsyncCompletesGroupsAsWaitedAndZeroFills) {
  std::vector<uint4> src(96);
  for (unsigned i = 0; i < 96; ++i) src[i] = make_uint4(0x01020304u * (i + 1), i, 0x80000000u | i, ~i);
  Dev<uint4> ds(96), out(5 * 32);
  ds.set(src);
  pb_emu_test::cp_async_groups(ds.p, out.p, s_);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess) << cudaGetErrorString(cudaStreamSynchronize(s_));
  const auto r = out.get();
  auto same = [](const uint4& a, const uint4& b) { return std::memcmp(&a, &b, 16) == 0; };
  const uint4 old = make_uint4(0xa5a5a5a5u, 0xa5a5a5a5u, 0xa5a5a5a5u, 0xa5a5a5a5u);
  for (int lane = 0; lane < 32; ++lane) {
    uint4 partial{};
    std::memcpy(&partial, &src[32 + lane], 5);  // src-size 5: the rest is zero
    EXPECT_TRUE(same(r[0 * 32 + lane], src[lane])) << "group 1 after wait_group 1, lane " << lane;
    EXPECT_TRUE(same(r[1 * 32 + lane], old)) << "group 2 is still pending after wait_group 1, lane " << lane;
    EXPECT_TRUE(same(r[2 * 32 + lane], partial)) << "group 2 after wait_group 0 (src-size 5), lane " << lane;
    EXPECT_TRUE(same(r[3 * 32 + lane], old)) << "an uncommitted copy is not waited for by wait_group 0, lane " << lane;
    EXPECT_TRUE(same(r[4 * 32 + lane], src[64 + lane])) << "wait_all commits and waits, lane " << lane;
  }
}

TEST_F(EmuAsync, CpAsyncMisuseFails) {
  Dev<uint4> src(64), dst(64);
  pb_emu_test::cp_async_misaligned_dst(src.p, s_);
  expect_launch_failure("misaligned .shared address");
  pb_emu::reset_after_failure_for_tests();
  pb_emu_test::cp_async_misaligned_src(src.p, s_);
  expect_launch_failure("misaligned address");
  pb_emu::reset_after_failure_for_tests();
  pb_emu_test::cp_async_src_size_too_large(src.p, s_);
  expect_launch_failure("src-size 17");
  pb_emu::reset_after_failure_for_tests();
  pb_emu_test::cp_async_global_dst(src.p, dst.p, s_);
  expect_launch_failure("is not in this block's shared memory");
}

TEST_F(EmuAsync, CpAsyncReadingPastItsSourceAllocationFails) {
  Dev<uint4> src(64);
  pb_emu_test::cp_async_past_the_end(src.p, s_);
  expect_launch_failure("the source");
  pb_emu::reset_after_failure_for_tests();
  pb_emu_test::cp_async_past_the_end(src.p, s_);
  expect_launch_failure("is not in any device allocation");
}

}  // namespace
