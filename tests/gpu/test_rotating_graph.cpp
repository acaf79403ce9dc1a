// Cold timing's rotating copies (kernels/cuda/rotating_graph.hpp): k copies of
// one op captured in one CUDA graph, each run once per replay and checked
// against the verified op. Runs on a GPU and, as emu.*, over the functional
// emulation (nothing here is timed).
#include <gtest/gtest.h>

#include "cuda/cuda_op.hpp"
#include "cuda/rotating_graph.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/decode_attention.hpp"
#include "phasebench/ops/prefill_attention.hpp"
#include "phasebench/ops/linear.hpp"

namespace phasebench {
namespace {

class RotatingGraphTest : public test::CudaContextTest {};

// Ops whose copies must agree: decode attention over a paged cache with forced
// splits (two kernels per copy, a workspace each) and the decode GEMV (M=3 with
// tails in N and K; stream-K fp32 atomics, so copies may differ in rounding only).
std::vector<OpRequest> requests() {
  return {decode_attention_request({2, 8, 2, 100, 64}, DType::bf16, true, 16, 4, 77, false),
          decode_attention_request({1, 32, 8, 33, 128}, DType::fp16, false, 0, 0, 78, false),
          linear_request({3, 200, 264}, DType::bf16, Impl::own, 5)};
}

TEST_F(RotatingGraphTest, EveryCopyRunsOnceAndComputesWhatWasVerified) {
  for (const OpRequest& r : requests()) {
    SCOPED_TRACE(r.kind);
    auto first = cuda::make_op(ctx(), r);
    ASSERT_NO_THROW(first->verify());
    // The constructor replays the graph once and compares every copy's output
    // with the verified op's: it throws when a copy did not run.
    cuda::RotatingGraph graph(ctx(), r, *first, 5);
    EXPECT_EQ(graph.copies(), 5u);
    EXPECT_TRUE(graph.checked());
    graph.launch(ctx().stream);
    graph.launch(ctx().stream);
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx().stream));
    EXPECT_NO_THROW(first->verify());  // the op is still right after replays
  }
}

TEST_F(RotatingGraphTest, NeedsTwoCopies) {
  const auto r = requests().back();
  auto first = cuda::make_op(ctx(), r);
  EXPECT_THROW(cuda::RotatingGraph(ctx(), r, *first, 1), std::logic_error);
}

}  // namespace
}  // namespace phasebench
