// The whole-layer op: prefill and decode on a tiny config verify against the
// CPU reference of the whole layer, verify() catches a wrong output, and the
// backend prepares and runs a layer point (and, on a real GPU, times it).
#include <gtest/gtest.h>

#include <cmath>

#include "backend.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/layer.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/layer.hpp"

using namespace phasebench;

namespace {

// h=256, I=512, Hq=4, Hkv=2, D=64 unless given (Llama's D=128 with GQA 4: Hq=8, Hkv=2, D=128).
OpRequest tiny_layer(Phase ph, std::uint64_t B, std::uint64_t n, DType t, std::uint64_t Hq = 4, std::uint64_t Hkv = 2,
                     std::uint64_t D = 64) {
  ModelConfig m;
  m.hidden = 256;
  m.intermediate = 512;
  m.heads = Hq;
  m.kv_heads = Hkv;
  m.head_dim = D;
  auto r = layer_request(m, ph, B, n, t);
  r.name = "test/layer";
  return r;
}

class LayerOpTest : public test::CudaContextTest {};

}  // namespace

TEST_F(LayerOpTest, PrefillVerifies) {
  for (DType t : {DType::bf16, DType::fp16})
    for (auto [B, S] : {std::pair<std::uint64_t, std::uint64_t>{1, 64}, {2, 100}, {3, 129}}) {
      auto op = cuda::make_op(ctx(), tiny_layer(Phase::prefill, B, S, t));
      EXPECT_NO_THROW(op->verify()) << to_string(t) << " B=" << B << " S=" << S;
    }
  // head_dim 128 (the flash kernel's other instantiation), 4 query heads per kv head.
  for (DType t : {DType::bf16, DType::fp16}) {
    auto op = cuda::make_op(ctx(), tiny_layer(Phase::prefill, 2, 150, t, 8, 2, 128));
    EXPECT_NO_THROW(op->verify()) << to_string(t) << " D=128";
  }
}

TEST_F(LayerOpTest, DecodeVerifies) {
  for (DType t : {DType::bf16, DType::fp16})
    for (auto [B, L] : {std::pair<std::uint64_t, std::uint64_t>{1, 1}, {4, 100}, {8, 1000}}) {
      auto op = cuda::make_op(ctx(), tiny_layer(Phase::decode, B, L, t));
      EXPECT_NO_THROW(op->verify()) << to_string(t) << " B=" << B << " L=" << L;
      op->run();  // runs again in place (the append rewrites the same slot)
      EXPECT_NO_THROW(op->verify());
    }
  for (DType t : {DType::bf16, DType::fp16}) {
    auto op = cuda::make_op(ctx(), tiny_layer(Phase::decode, 3, 700, t, 8, 2, 128));
    EXPECT_NO_THROW(op->verify()) << to_string(t) << " D=128";
  }
}

TEST_F(LayerOpTest, OutputIsFiniteAndNonZero) {
  auto op = cuda::make_op(ctx(), tiny_layer(Phase::decode, 2, 300, DType::bf16));
  op->run();
  auto* acc = dynamic_cast<cuda::LayerOpAccess*>(op.get());
  ASSERT_NE(acc, nullptr);
  const auto out = acc->output_as_float();
  ASSERT_EQ(out.size(), 2u * 256);
  std::size_t nonzero = 0;
  for (float v : out) {
    ASSERT_TRUE(std::isfinite(v));
    nonzero += v != 0.f;
  }
  EXPECT_GT(nonzero, out.size() / 2);
  EXPECT_EQ(acc->op_names().size(), 11u);
}

TEST_F(LayerOpTest, WrongOutputFailsVerification) {
  for (Phase ph : {Phase::prefill, Phase::decode}) {
    auto op = cuda::make_op(ctx(), tiny_layer(ph, 2, 64, DType::bf16));
    dynamic_cast<cuda::LayerOpAccess&>(*op).set_fault_injection(true);
    EXPECT_THROW(op->verify(), VerificationError);
  }
}

TEST(LayerBackend, PreparesRunsAndTimesOnAGpu) {
  PB_SKIP_IF_NO_GPU();
  std::string why;
  auto b = make_cuda_backend(&why);
  ASSERT_NE(b, nullptr) << why;
  EXPECT_TRUE(b->implements(kLayer, DType::bf16, Impl::own));
  EXPECT_FALSE(b->implements(kLayer, DType::fp32, Impl::own));
  EXPECT_FALSE(b->implements(kLayer, DType::bf16, Impl::blas));
  auto gemma_like = tiny_layer(Phase::decode, 1, 16, DType::bf16);
  gemma_like.options.edit<LayerOptions>().norms_per_layer = 4;
  EXPECT_TRUE(b->cannot_run(gemma_like).has_value());
  auto odd_d = tiny_layer(Phase::decode, 1, 16, DType::bf16);
  odd_d.shape.set("D", 96);
  EXPECT_TRUE(b->cannot_run(odd_d).has_value());
  for (Phase ph : {Phase::prefill, Phase::decode}) {
    const auto r = tiny_layer(ph, 2, 128, DType::bf16);
    ASSERT_FALSE(b->cannot_run(r).has_value()) << *b->cannot_run(r);
    auto op = b->prepare(r);
    op->verify();
#if !PHASEBENCH_CUDA_EMU  // the emulation never times
    TimingOptions opts;
    opts.range_name = "test/layer";
    const auto s = b->time(*op, opts);
    EXPECT_GT(s.seconds, 0);
#endif
  }
}
