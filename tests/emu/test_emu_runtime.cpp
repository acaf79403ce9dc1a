// Tests of the functional CUDA emulation itself (kernels/cuda_emu): intrinsics
// against their CUDA definitions, mma.sync against a CPU matmul, and every
// misuse it promises to report (a divergent barrier, a lane missing from a
// collective, a misaligned vector access, shared memory or a grid over the
// device's limits, an out-of-bounds read) failing the launch with a message
// instead of hanging. Also the runtime: lazy streams, events, graphs, copies.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "emu_kernels.hpp"
#include "emu_test_util.hpp"

namespace {

using pb_emu_test::Dev;

class EmuRuntime : public pb_emu_test::EmuStreamTest {
 protected:
  // The launches made so far fail with an error whose message contains `what` and names the block.
  void expect_launch_failure(const std::string& what) {
    EmuStreamTest::expect_launch_failure(what);
    if (HasFatalFailure()) return;
    const std::string msg = cudaGetErrorString(cudaErrorLaunchFailure);  // the failure's message, as the base read it
    EXPECT_NE(msg.find("block ("), std::string::npos) << "the message names the block: " << msg;
  }
};

// ---- intrinsics --------------------------------------------------------------------

TEST_F(EmuRuntime, ShufflesFollowCudaWidthRules) {
  Dev<int> out(32);
  auto run = [&](int mode, int src, int width) {
    pb_emu_test::shuffle(mode, src, width, out.p, s_);
    EXPECT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    return out.get();
  };
  for (int width : {32, 16, 8, 4}) {
    const auto idx = run(0, 35, width);   // a source beyond the width wraps within the segment
    const auto xr = run(1, 5, width);
    const auto dn = run(2, 3, width);
    const auto up = run(3, 3, width);
    for (int lane = 0; lane < 32; ++lane) {
      const int seg = lane & ~(width - 1);
      EXPECT_EQ(idx[lane], 100 + seg + 35 % width) << "idx width " << width << " lane " << lane;
      const int x = lane ^ 5;
      EXPECT_EQ(xr[lane], 100 + (x >= seg + width ? lane : x)) << "xor width " << width << " lane " << lane;
      EXPECT_EQ(dn[lane], 100 + (lane + 3 >= seg + width ? lane : lane + 3)) << "down width " << width;
      EXPECT_EQ(up[lane], 100 + (lane - 3 < seg ? lane : lane - 3)) << "up width " << width;
    }
  }
}

TEST_F(EmuRuntime, VotesOverPartialMasks) {
  Dev<unsigned> out(3);
  for (unsigned mask : {0xffffffffu, 0x0000fff0u, 0x00000001u, 0x80000000u}) {
    pb_emu_test::votes(mask, out.p, s_);
    ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    const auto r = out.get();
    unsigned want = 0;
    for (int l = 0; l < 32; ++l)
      if ((mask >> l & 1u) && l % 3 == 0) want |= 1u << l;
    EXPECT_EQ(r[0], want) << std::hex << mask;
    EXPECT_EQ(r[1], want != 0 ? 1u : 0u) << std::hex << mask;
    EXPECT_EQ(r[2], want == mask ? 1u : 0u) << std::hex << mask;
  }
}

TEST_F(EmuRuntime, DisjointAndOverlappingPartialMasksAreLegal) {
  Dev<int> out(35);
  pb_emu_test::partial_masks(out.p, s_);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess) << cudaGetErrorString(cudaStreamSynchronize(s_));
  const auto r = out.get();
  for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(r[lane], lane ^ 16) << lane;
  // lane 0 gets lane 1's value after 1 and 2 swapped (2); lane 1 gets lane 0's (0); lane 2 has lane 1's (1).
  EXPECT_EQ(r[32], 2);
  EXPECT_EQ(r[33], 0);
  EXPECT_EQ(r[34], 1);
}

TEST_F(EmuRuntime, MmaSyncMatchesACpuMatmul) {
  for (bool bf16 : {true, false}) {
    std::vector<std::uint16_t> A(16 * 16), B(16 * 8);
    std::vector<float> a(A.size()), b(B.size());
    for (std::size_t i = 0; i < A.size(); ++i) {
      const float v = phasebench::numeric::random_value(7, i, 1.0f);
      A[i] = bf16 ? phasebench::numeric::float_to_bf16(v) : phasebench::numeric::float_to_fp16(v);
      a[i] = bf16 ? phasebench::numeric::bf16_to_float(A[i]) : phasebench::numeric::fp16_to_float(A[i]);
    }
    for (std::size_t i = 0; i < B.size(); ++i) {
      const float v = phasebench::numeric::random_value(8, i, 1.0f);
      B[i] = bf16 ? phasebench::numeric::float_to_bf16(v) : phasebench::numeric::float_to_fp16(v);
      b[i] = bf16 ? phasebench::numeric::bf16_to_float(B[i]) : phasebench::numeric::fp16_to_float(B[i]);
    }
    Dev<std::uint16_t> dA(A.size()), dB(B.size());
    Dev<float> dD(16 * 8);
    dA.set(A);
    dB.set(B);
    pb_emu_test::mma_16816(dA.p, dB.p, dD.p, bf16, s_);
    ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    const auto D = dD.get();
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 8; ++c) {
        double want = 0;
        for (int k = 0; k < 16; ++k) want += static_cast<double>(a[r * 16 + k]) * b[k * 8 + c];
        EXPECT_NEAR(D[r * 8 + c], want, 1e-5) << (bf16 ? "bf16" : "fp16") << " D[" << r << "][" << c << "]";
      }
  }
}

TEST_F(EmuRuntime, BarriersOrderSharedMemoryAcrossBlocksAndSizes) {
  for (int threads : {1, 31, 32, 33, 256, 1000, 1024}) {
    Dev<int> out(3);
    pb_emu_test::block_sum(3, threads, out.p, s_);
    ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    for (int v : out.get()) EXPECT_EQ(v, threads * (threads - 1) / 2) << threads << " threads";
  }
}

TEST_F(EmuRuntime, UnwrittenSharedMemoryIsPoisoned) {
  Dev<unsigned> out(1);
  pb_emu_test::read_unwritten_shared(out.p, s_);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  EXPECT_EQ(out.get()[0], 0xffffffffu) << "uninitialised shared memory must not read as zeros";
}

// ---- misuse is a failed launch with a message ------------------------------------------

TEST_F(EmuRuntime, DivergentBarrierFails) {
  pb_emu_test::divergent_barrier(s_);
  expect_launch_failure("divergent barrier");
}

// A lane that returned is absent from a later .sync collective (legal); reading
// its value is not.
TEST_F(EmuRuntime, ReadingALaneThatReturnedFails) {
  pb_emu_test::lane_returns_before_shuffle(s_);
  expect_launch_failure("reads lane 5, which is not in the mask 0xffffffff or has returned");
}

TEST_F(EmuRuntime, LanesThatReturnedAreAbsentFromAVote) {
  Dev<unsigned> out(3);
  pb_emu_test::votes_after_returns(out.p, s_);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  const auto r = out.get();
  EXPECT_EQ(r[0], 0x00049249u) << std::hex << r[0];  // lanes 0, 3, ..., 18 of the 20 still there
  EXPECT_EQ(r[1], 1u);
  EXPECT_EQ(r[2], 0u);
}

TEST_F(EmuRuntime, LaneMissingFromAShuffleIsADeadlockNotAHang) {
  pb_emu_test::lane_skips_shuffle_at_barrier(s_);
  expect_launch_failure("deadlock");
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorLaunchFailure)).find("lanes 7 never arrived"), std::string::npos)
      << cudaGetErrorString(cudaErrorLaunchFailure);
}

TEST_F(EmuRuntime, MaskWithoutTheCallingLaneFails) {
  pb_emu_test::mask_without_self(s_);
  expect_launch_failure("does not include the lane itself");
}

TEST_F(EmuRuntime, MisalignedVectorLoadFails) {
  Dev<unsigned char> buf(64);
  pb_emu_test::misaligned_vector_load(buf.p, s_);
  expect_launch_failure("misaligned address");
}

TEST_F(EmuRuntime, StaticSharedMemoryOverTheLimitFails) {
  pb_emu_test::too_much_static_shared(s_);
  expect_launch_failure("48 KiB");
}

TEST_F(EmuRuntime, LargeDynamicSharedMemoryNeedsTheAttribute) {
  pb_emu_test::dynamic_shared_without_attribute(64 * 1024, s_);
  expect_launch_failure("cudaFuncAttributeMaxDynamicSharedMemorySize");
  pb_emu::reset_after_failure_for_tests();
  pb_emu_test::dynamic_shared_with_attribute(64 * 1024, s_);
  EXPECT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
}

TEST_F(EmuRuntime, LaunchBoundsAreEnforced) {
  pb_emu_test::over_launch_bounds(s_);
  expect_launch_failure("__launch_bounds__(128)");
}

TEST_F(EmuRuntime, ConfigurationsOverTheHardwareLimitsAreRefusedAtLaunch) {
  struct Bad {
    dim3 grid, block;
    std::size_t smem;
    cudaError_t want;
  };
  for (const Bad& b : {Bad{dim3(1), dim3(1025), 0, cudaErrorInvalidConfiguration},
                       Bad{dim3(1), dim3(1, 1, 65), 0, cudaErrorInvalidConfiguration},
                       Bad{dim3(1, 65536), dim3(32), 0, cudaErrorInvalidConfiguration},
                       Bad{dim3(0), dim3(32), 0, cudaErrorInvalidConfiguration},
                       Bad{dim3(1), dim3(32), 300 * 1024, cudaErrorInvalidValue}}) {
    pb_emu_test::launch_with(b.grid, b.block, b.smem, s_);
    const cudaError_t e = cudaGetLastError();
    EXPECT_EQ(e, b.want) << cudaGetErrorName(e);
    EXPECT_NE(std::string(cudaGetErrorString(e)).find("empty_kernel"), std::string::npos) << cudaGetErrorString(e);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a configuration error is not sticky";
  }
  // At the limits: legal.
  pb_emu_test::launch_with(dim3(1, 1, 65535), dim3(1), 0, s_);
  pb_emu_test::launch_with(dim3(1), dim3(1, 1, 64), 0, s_);
  pb_emu_test::launch_with(dim3(1), dim3(1024), 48 * 1024, s_);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
}

// The emulated suite stands in for compute-sanitizer memcheck: device memory is
// exactly sized, and AddressSanitizer stops a kernel that reads one element past it.
void read_one_past_ten_ints() {
  int* p = nullptr;
  int* out = nullptr;
  cudaMalloc(&p, 10 * sizeof(int));
  cudaMalloc(&out, sizeof(int));
  pb_emu_test::read_past_the_end(p, 10, out, nullptr);
  cudaDeviceSynchronize();
}

TEST(EmuRuntimeDeathTest, ReadingPastAnAllocationIsCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(read_one_past_ten_ints(), "heap-buffer-overflow");
}

// ---- the runtime ---------------------------------------------------------------------------

// Work waits in its stream until something waits for it, so a kernel on a
// non-blocking stream does not see a memset still queued on the legacy stream:
// the race the real GPU may or may not show, the emulation always shows.
TEST_F(EmuRuntime, NonBlockingStreamsAreNotOrderedWithTheLegacyStream) {
  Dev<int> in(256), out(256);
  in.set(std::vector<int>(256, 7));
  ASSERT_EQ(cudaMemset(in.p, 0, 256 * sizeof(int)), cudaSuccess);  // legacy stream, queued
  pb_emu_test::copy(in.p, out.p, 256, s_);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  std::vector<int> got(256);
  ASSERT_EQ(cudaMemcpyAsync(got.data(), out.p, 256 * sizeof(int), cudaMemcpyDeviceToHost, s_), cudaSuccess);
  EXPECT_EQ(got[0], 7) << "the copy ran before the unsynchronised memset";
  // A blocking stream is ordered after the legacy stream's earlier work.
  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaMemset(in.p, 0, 256 * sizeof(int)), cudaSuccess);
  pb_emu_test::copy(in.p, out.p, 256, blocking);
  ASSERT_EQ(cudaStreamSynchronize(blocking), cudaSuccess);
  EXPECT_EQ(out.get()[255], 0);
  cudaStreamDestroy(blocking);
}

TEST_F(EmuRuntime, EventsOrderWorkButHaveNoTime) {
  Dev<int> in(64), out(64);
  in.set(std::vector<int>(64, 3));
  cudaEvent_t done = nullptr;
  ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
  pb_emu_test::copy(in.p, out.p, 64, s_);
  ASSERT_EQ(cudaEventRecord(done, s_), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(done), cudaSuccess);
  EXPECT_EQ(out.get()[63], 3);
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, done, done), cudaErrorNotSupported);
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorNotSupported)).find("never speed"), std::string::npos);
  cudaGetLastError();
  cudaEventDestroy(done);
}

TEST_F(EmuRuntime, GraphsReplayWhatWasCaptured) {
  Dev<int> a(100), b(100);
  a.set(std::vector<int>(100, 1));
  b.set(std::vector<int>(100, 0));
  ASSERT_EQ(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  pb_emu_test::copy(a.p, b.p, 100, s_);
  ASSERT_EQ(cudaMemsetAsync(a.p, 0, 100 * sizeof(int), s_), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s_, &graph), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  EXPECT_EQ(b.get()[0], 0) << "capturing records the work; it does not run it";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  EXPECT_EQ(b.get()[99], 1);
  EXPECT_EQ(a.get()[0], 0);
  a.set(std::vector<int>(100, 5));
  ASSERT_EQ(cudaGraphLaunch(exec, s_), cudaSuccess);  // a replay runs the same work again
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  EXPECT_EQ(b.get()[50], 5);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_F(EmuRuntime, SynchronisingDuringACaptureInvalidatesIt) {
  ASSERT_EQ(cudaStreamBeginCapture(s_, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s_), cudaErrorStreamCaptureUnsupported);
  int* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorStreamCaptureUnsupported) << "no allocation during a global capture";
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s_, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  cudaGetLastError();
}

TEST_F(EmuRuntime, CopiesAreCheckedAgainstTheirAllocations) {
  Dev<int> d(10);
  std::vector<int> h(11);
  EXPECT_EQ(cudaMemcpy(d.p, h.data(), 11 * sizeof(int), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorInvalidValue)).find("past the end of its allocation"),
            std::string::npos)
      << cudaGetErrorString(cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h.data(), d.p, 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue) << "kind names the wrong side";
  EXPECT_EQ(cudaMemsetAsync(d.p + 5, 0, 6 * sizeof(int), s_), cudaErrorInvalidValue);
  int x = 0;
  EXPECT_EQ(cudaFree(&x), cudaErrorInvalidValue) << "freeing host memory";
  cudaGetLastError();
}

TEST_F(EmuRuntime, DeviceIsANamedTarget) {
  cudaDeviceProp p{};
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  EXPECT_NE(std::string(p.name).find("pb_emu"), std::string::npos) << p.name;
  int major = 0, sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(major, p.major);
  EXPECT_EQ(sms, p.multiProcessorCount);
  EXPECT_GT(p.sharedMemPerBlockOptin, p.sharedMemPerBlock);
  std::size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  EXPECT_GT(free_b, 0u);
  EXPECT_LE(free_b, total_b);
}

}  // namespace
