// The collectives on CUDA (kernels/cuda/collectives.cpp: NCCL over the GPUs of this
// process) against the reference, through cuda::make_op (verify checks every rank's
// receive buffer): all_reduce, all_gather, reduce_scatter and all_to_all over 1 to 4
// GPUs where the machine has them (the emulated builds run with PB_EMU_DEVICES=4),
// bf16, fp16 and fp32, tail-heavy counts (one element a rank, odd counts); a wrong
// element is caught; what cannot run says why. Skips where no GPU is present.
#if PHASEBENCH_HAVE_NCCL_TESTS
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/collectives.hpp"
#include "cuda/cuda_op.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/collectives.hpp"

namespace phasebench {
namespace {

class CollectivesTest : public test::CudaContextTest {};

const char* const kKinds[] = {kAllReduce, kAllGather, kReduceScatter, kAllToAll};

TEST_F(CollectivesTest, EveryCollectiveMatchesTheReferenceOnEveryRank) {
  int ran = 0;
  for (std::uint64_t n : {1, 2, 3, 4}) {
    if (n > static_cast<std::uint64_t>(devices())) continue;
    for (const char* kind : kKinds)
      for (DType t : {DType::bf16, DType::fp16, DType::fp32})
        // All-reduce: any count; the others: whole elements a rank (1, 5, 257 of them).
        for (std::uint64_t per : {1, 5, 257}) {
          const std::uint64_t count = std::string(kind) == kAllReduce ? per * 3 + 1 : per * n;
          auto op = cuda::make_op(ctx(), collective_request(kind, count, n, t, Phase::decode, 11 + per));
          EXPECT_NO_THROW(op->verify()) << kind << " " << to_string(t) << " count=" << count << " n=" << n;
          ++ran;
        }
  }
  EXPECT_GT(ran, 0);
}

TEST_F(CollectivesTest, RanksStartAtTheBackendsDeviceAndRepeatedRunsAgree) {
  const std::uint64_t n = std::min(2, devices());
  auto op = cuda::make_op(ctx(), collective_request(kAllReduce, 4099, n, DType::bf16, Phase::decode));
  auto* access = dynamic_cast<cuda::CollectivesOpAccess*>(op.get());
  ASSERT_NE(access, nullptr);
  ASSERT_EQ(access->devices().size(), n);
  for (std::uint64_t i = 0; i < n; ++i) EXPECT_EQ(access->devices()[i], static_cast<int>(i));
  op->run();
  const auto first = op->output_values();
  op->run();
  op->run();
  EXPECT_EQ(op->output_values(), first) << "out of place: every run reduces the same inputs";
  EXPECT_TRUE(op->single_launch_only().has_value());
  EXPECT_EQ(op->notes().count("nccl"), 1u);
}

TEST_F(CollectivesTest, WrongOutputIsCaught) {
  const std::uint64_t n = std::min(4, devices());
  for (const char* kind : kKinds) {
    auto op = cuda::make_op(ctx(), collective_request(kind, 8 * n, n, DType::bf16, Phase::decode));
    auto* access = dynamic_cast<cuda::CollectivesOpAccess*>(op.get());
    ASSERT_NE(access, nullptr);
    access->set_fault_injection(true);
    EXPECT_THROW(op->verify(), VerificationError) << kind;
    access->set_fault_injection(false);
    EXPECT_NO_THROW(op->verify()) << kind;
  }
}

TEST_F(CollectivesTest, WhatCannotRunSaysWhy) {
  const auto more = static_cast<std::uint64_t>(devices()) + 1;
  const auto why = cuda::cannot_run(ctx(), collective_request(kAllReduce, 1024, more, DType::bf16, Phase::decode));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("needs " + std::to_string(more) + " GPUs"), std::string::npos) << *why;
  if (devices() >= 2) {
    const auto odd = cuda::cannot_run(ctx(), collective_request(kAllGather, 1025, 2, DType::bf16, Phase::decode));
    ASSERT_TRUE(odd.has_value());
    EXPECT_NE(odd->find("divide"), std::string::npos) << *odd;
  }
  EXPECT_TRUE(cuda::cannot_run(ctx(), collective_request(kAllToAll, 64, 1, DType::fp8, Phase::decode)).has_value());
}

}  // namespace
}  // namespace phasebench
#endif
