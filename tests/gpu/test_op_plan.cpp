// One point, one plan (issue 26): the CUDA backend's check of a request
// (cannot_run) makes its plan (limits, scratch, the kernels' params, the
// split-KV plan), the prepare() that follows builds the op from that plan, and
// the rotating copies of the cold timing are built from it too. cuda::plans_made()
// counts every plan made. Runs on a GPU and, as emu.*, over the emulation.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/rotating_graph.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/model.hpp"
#include "phasebench/ops/decode_attention.hpp"
#include "phasebench/ops/latent_attention.hpp"
#include "phasebench/ops/layer.hpp"
#include "phasebench/ops/linear.hpp"

namespace phasebench {
namespace {

OpRequest tiny_decode_layer() {
  ModelConfig m;
  m.hidden = 256;
  m.intermediate = 512;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 64;
  auto r = layer_request(m, Phase::decode, 2, 300, DType::bf16);
  r.name = "test/layer";
  return r;
}

// One request of each kind of plan: decode attention with the split count
// chosen from the occupancy query (paged) and requested (contiguous), MLA decode
// attention, the whole layer (decode attention's split plan inside), and a plan
// of limits and scratch only (the decode GEMV).
std::vector<OpRequest> requests() {
  return {decode_attention_request({1, 8, 2, 700, 64}, DType::bf16, true, 16, 0, 11, false),
          decode_attention_request({2, 8, 2, 300, 128}, DType::fp16, false, 0, 4, 12, false),
          latent_attention_request({1, 16, 200, 512, 64}, DType::bf16, false, 192, 0, 0, 13),
          tiny_decode_layer(),
          linear_request({3, 200, 264}, DType::bf16, Impl::own, 14)};
}

// The backend the suites share (test::shared_cuda_backend).
class OpPlanTest : public test::GpuTest {
 protected:
  static Backend& backend() { return test::shared_cuda_backend(); }
};

// What a point does (bench/fixture.cpp): cannot_run, prepare, verify, run.
TEST_F(OpPlanTest, APointIsCheckedAndPlannedOnce) {
  for (const OpRequest& r : requests()) {
    SCOPED_TRACE(r.kind);
    const std::uint64_t before = cuda::plans_made();
    ASSERT_EQ(backend().cannot_run(r), std::nullopt);
    auto op = backend().prepare(r);
    ASSERT_NO_THROW(op->verify());
    op->run();
    backend().synchronize();
    EXPECT_EQ(cuda::plans_made() - before, 1u) << "the check, the op and its run share one plan";
  }
}

TEST_F(OpPlanTest, APrepareWithoutACheckPlansOnce) {
  const OpRequest r = requests().front();
  const std::uint64_t before = cuda::plans_made();
  auto op = backend().prepare(r);
  EXPECT_EQ(cuda::plans_made() - before, 1u);
}

// The check kept for prepare() is the last request's only: another request is
// checked (and planned) on its own, and runs by its own plan.
TEST_F(OpPlanTest, APrepareOfAnotherRequestPlansItsOwn) {
  const auto all = requests();
  const OpRequest& asked = all[0];     // splits chosen
  const OpRequest& prepared = all[1];  // 4 splits requested
  const std::uint64_t before = cuda::plans_made();
  ASSERT_EQ(backend().cannot_run(asked), std::nullopt);
  auto op = backend().prepare(prepared);
  EXPECT_EQ(cuda::plans_made() - before, 2u);
  // Built from the first request's plan (paged, head_dim 64, one sequence) the op
  // would not compute the second's attention.
  EXPECT_NO_THROW(op->verify());
}

// A request that cannot run says why from its plan, and prepare() throws the same reason.
TEST_F(OpPlanTest, AnUnsupportedRequestSaysWhyOnceAndPrepareThrowsIt) {
  const OpRequest bad = decode_attention_request({1, 8, 2, 64, 96}, DType::bf16, false, 0, 0, 15, false);  // head_dim 96
  const std::uint64_t before = cuda::plans_made();
  const auto why = backend().cannot_run(bad);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("head_dim 96"), std::string::npos) << *why;
  try {
    backend().prepare(bad);
    ADD_FAILURE() << "prepare() ran a request that cannot run";
  } catch (const Unsupported& e) {
    EXPECT_EQ(std::string(e.what()), *why);
  }
  EXPECT_EQ(cuda::plans_made() - before, 1u);
}

class RotatingCopiesPlanTest : public test::CudaContextTest {};

// The cold timing's copies are built from the plan the first op was built from.
TEST_F(RotatingCopiesPlanTest, CopiesReuseTheFirstOpsPlan) {
  const OpRequest r = requests().front();
  const cuda::CheckedRequest checked = cuda::check_request(ctx(), r);
  ASSERT_EQ(checked.why, std::nullopt);
  auto first = cuda::make_op(ctx(), r, checked);
  ASSERT_NO_THROW(first->verify());
  std::uint64_t before = cuda::plans_made();
  {
    cuda::RotatingGraph graph(ctx(), r, *first, 3, checked);
    EXPECT_EQ(graph.copies(), 3u);
  }
  EXPECT_EQ(cuda::plans_made() - before, 0u) << "the copies planned again";
  // Without the plan the graph checks the request once for all its copies.
  before = cuda::plans_made();
  cuda::RotatingGraph graph(ctx(), r, *first, 3);
  EXPECT_EQ(cuda::plans_made() - before, 1u);
}

}  // namespace
}  // namespace phasebench
