// The whole-layer op: prefill and decode on a tiny config verify against the
// CPU reference of the whole layer, verify() catches a wrong output, and the
// backend prepares and runs a layer point (and, on a real GPU, times it). The
// tensor-parallel layer (layer_tp.cpp, with NCCL) over 2 and 4 GPUs where the
// machine has them (the emulated builds run with PB_EMU_DEVICES=4): every rank's
// output against the reference of the whole layer, KV heads split and replicated.
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
                     std::uint64_t D = 64, std::uint64_t gpus = 1) {
  ModelConfig m;
  m.hidden = 256;
  m.intermediate = 512;
  m.heads = Hq;
  m.kv_heads = Hkv;
  m.head_dim = D;
  auto r = layer_request(m, ph, B, n, t, 0x5eed, gpus);
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

#if PHASEBENCH_HAVE_NCCL_TESTS
// 2 GPUs: 2 query heads and 1 KV head a GPU, intermediate 256; 4 GPUs: 1 query
// head a GPU, the 2 KV heads replicated (one a GPU), intermediate 128. Odd
// prompts and batches (tails of the attention and append kernels' tiles).
TEST_F(LayerOpTest, TensorParallelVerifiesOnEveryRank) {
  int ran = 0;
  for (std::uint64_t g : {2, 4}) {
    if (g > static_cast<std::uint64_t>(devices())) continue;
    for (DType t : {DType::bf16, DType::fp16}) {
      auto pre = cuda::make_op(ctx(), tiny_layer(Phase::prefill, 3, 129, t, 4, 2, 64, g));
      EXPECT_NO_THROW(pre->verify()) << to_string(t) << " prefill over " << g << " GPUs";
      auto dec = cuda::make_op(ctx(), tiny_layer(Phase::decode, 5, 333, t, 4, 2, 64, g));
      EXPECT_NO_THROW(dec->verify()) << to_string(t) << " decode over " << g << " GPUs";
      dec->run();  // again in place (the append rewrites the same slot)
      EXPECT_NO_THROW(dec->verify());
      ran += 2;
    }
  }
  // head_dim 128, 8 query heads and 2 KV heads over 2 GPUs.
  if (devices() >= 2) {
    auto op = cuda::make_op(ctx(), tiny_layer(Phase::decode, 2, 100, DType::bf16, 8, 2, 128, 2));
    EXPECT_NO_THROW(op->verify()) << "D=128 over 2 GPUs";
    ++ran;
  }
  if (devices() < 2) GTEST_SKIP() << "one device: no tensor-parallel layer to run";
  EXPECT_GT(ran, 0);
}

TEST_F(LayerOpTest, TensorParallelRunsItsShardsAndAllReduces) {
  if (devices() < 2) GTEST_SKIP() << "one device: no tensor-parallel layer to run";
  auto op = cuda::make_op(ctx(), tiny_layer(Phase::decode, 2, 50, DType::bf16, 4, 2, 64, 2));
  auto* acc = dynamic_cast<cuda::LayerOpAccess*>(op.get());
  ASSERT_NE(acc, nullptr);
  const auto names = acc->op_names();
  ASSERT_EQ(names.size(), 13u);
  EXPECT_EQ(names[7], "attn_all_reduce");
  EXPECT_EQ(names[12], "mlp_all_reduce");
  op->run();
  const auto out = acc->output_as_float();
  ASSERT_EQ(out.size(), 2u * 256);  // the whole hidden width on every rank
  EXPECT_TRUE(op->single_launch_only().has_value());
  EXPECT_EQ(op->notes().count("nccl"), 1u);
  EXPECT_EQ(op->notes().at("devices"), "0,1");
  acc->set_fault_injection(true);  // the last rank's output zeroed
  EXPECT_THROW(op->verify(), VerificationError);
}

TEST_F(LayerOpTest, TensorParallelSaysWhatCannotRun) {
  const auto more = static_cast<std::uint64_t>(devices()) + 1;
  const auto why = cuda::cannot_run(ctx(), tiny_layer(Phase::decode, 1, 16, DType::bf16, 4, 2, 64, more * 2));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("this machine shows " + std::to_string(devices())), std::string::npos) << *why;
  if (devices() >= 3) {  // 4 heads do not split 3 ways
    const auto odd = cuda::cannot_run(ctx(), tiny_layer(Phase::decode, 1, 16, DType::bf16, 4, 2, 64, 3));
    ASSERT_TRUE(odd.has_value());
    EXPECT_NE(odd->find("not divisible by 3"), std::string::npos) << *odd;
  }
}
#endif
