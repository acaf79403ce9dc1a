// The fused residual add and RMSNorm (ops/fused_add_rmsnorm.hpp): its cost by
// hand, the reference on a row computed by hand, the CPU op against the
// reference on tail-heavy shapes in every dtype it takes, the sweep group's
// points and names (and its batch axis from the command line), bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cli_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/fused_add_rmsnorm.hpp"
#include "reference/fused_add_rmsnorm.hpp"
#include "sweep.hpp"

using namespace phasebench;

TEST(FusedAddRmsnorm, CostByHand) {
  // bf16, 3 tokens of 4096: x and residual read, residual_out and y written, the weight read once.
  const auto c = fused_add_rmsnorm_request(3, 4096, DType::bf16).cost();
  EXPECT_EQ(c.flops, 0u);
  EXPECT_EQ(c.bytes.activations, 2ull * 2 * 3 * 4096);
  EXPECT_EQ(c.bytes.weights, 2ull * 4096);
  EXPECT_EQ(c.bytes.writes, 2ull * 2 * 3 * 4096);
  EXPECT_EQ(c.bytes.total(), 2ull * (4 * 3 * 4096 + 4096));
  EXPECT_EQ(fused_add_rmsnorm_request(3, 4096, DType::bf16).footprint_bytes(), c.bytes.total());
  EXPECT_EQ(fused_add_rmsnorm_request(3, 4096, DType::fp32).cost().bytes.total(), 2 * c.bytes.total());
}

TEST(FusedAddRmsnorm, ReferenceByHand) {
  // x + residual = (3, 4): mean square 12.5, so y = (3, 4) / sqrt(12.5 + eps) * w.
  const float x[2] = {1, 5}, res[2] = {2, -1}, w[2] = {1, 0.5f};
  double sum[2], y[2];
  reference::fused_add_rmsnorm_row(x, res, w, 2, 1e-6, sum, y);
  EXPECT_DOUBLE_EQ(sum[0], 3);
  EXPECT_DOUBLE_EQ(sum[1], 4);
  const double inv = 1 / std::sqrt(12.5 + 1e-6);
  EXPECT_NEAR(y[0], 3 * inv, 1e-12);
  EXPECT_NEAR(y[1], 4 * inv * 0.5, 1e-12);
}

TEST(FusedAddRmsnorm, CpuOpMatchesReferenceOnTailHeavyShapes) {
  // One row and odd row counts (the threads' split), hidden sizes of 1, odd, and
  // a multiple of 8 plus 8 (the CUDA kernel's vectors), every dtype the CPU takes.
  auto b = make_cpu_backend();
  for (DType t : {DType::fp32, DType::bf16, DType::fp16})
    for (const auto& [M, h] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{
             {1, 1}, {1, 8}, {3, 24}, {17, 4104}, {5, 333}, {64, 2048}})
      EXPECT_NO_THROW(b->prepare(fused_add_rmsnorm_request(M, h, t, 9 + M))->verify())
          << to_string(t) << " M=" << M << " h=" << h;
}

TEST(FusedAddRmsnorm, SweepPointsAndNames) {
  auto b = make_cpu_backend();
  SweepConfig c;
  c.groups = {"fused_add_rmsnorm"};
  apply_defaults(c, *b);
  const auto pts = build_sweep(c, *b);
  ASSERT_EQ(pts.size(), 3u);  // CPU defaults: batches 1, 16, 256 at llama-3.1-8b's hidden size
  EXPECT_EQ(pts.front().name, "decode/fused_add_rmsnorm/llama-3.1-8b/fp32/batch:1");
  EXPECT_EQ(pts.back().name, "decode/fused_add_rmsnorm/llama-3.1-8b/fp32/batch:256");
  for (const auto& p : pts) {
    EXPECT_EQ(p.op, kFusedAddRmsnorm);
    EXPECT_EQ(p.request.shape["h"], 4096u);
    EXPECT_EQ(p.cost.bytes.total(), p.request.cost().bytes.total());
    EXPECT_FALSE(b->cannot_run(p.request).has_value());
  }
  // The batch axis from the command line, at another model's hidden size.
  SweepConfig q;
  q.groups = {"fused_add_rmsnorm"};
  q.models = {"qwen2.5-7b"};
  q.models_given = true;
  q.axes["fused_add_rmsnorm"].sizes["batch"] = {3, 7};
  apply_defaults(q, *b);
  const auto p2 = build_sweep(q, *b);
  ASSERT_EQ(p2.size(), 2u);
  EXPECT_EQ(p2[1].name, "decode/fused_add_rmsnorm/qwen2.5-7b/fp32/batch:7");
  EXPECT_EQ(p2[1].request.shape["h"], 3584u);
}

TEST(FusedAddRmsnorm, BadInputIsOneLineAndStatus2) {
  auto r = test::run_cli("run --backend=cpu --ops fused_add_rmsnorm --axis fused_add_rmsnorm.batch=0 --verify-only");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("fused_add_rmsnorm.batch"), std::string::npos) << r.out;
  r = test::run_cli("run --backend=cpu --ops fused_add_rmsnorm --axis fused_add_rmsnorm.batch=2 --verify-only");
  EXPECT_EQ(r.status, 0) << r.out;
  auto b = make_cpu_backend();
  EXPECT_TRUE(b->cannot_run(fused_add_rmsnorm_request(0, 4096, DType::fp32)).has_value());
}
