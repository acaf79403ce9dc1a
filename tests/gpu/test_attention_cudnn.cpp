// The cuDNN attention rows (Impl::cudnn: kernels/cuda/prefill_attention_cudnn.cpp,
// decode_attention_cudnn.cpp) on a device: against the CPU reference on tail shapes,
// every element against our kernels, a corrupted output caught, cuDNN's refusals as
// reasons not to run, and the notes a point's JSON records. Built only where those rows
// are (PHASEBENCH_HAVE_CUDNN), never over the emulation (cuDNN is a closed library);
// skipped without a device. Written before any device was at hand: never run yet.
#if PHASEBENCH_HAVE_CUDNN

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "reference/common.hpp"
#include "cuda/attention_ops.hpp"
#include "cuda/cuda_op.hpp"
#include "phasebench/context_dist.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/decode_attention.hpp"
#include "phasebench/ops/prefill_attention.hpp"

namespace phasebench {
namespace {

using cuda::AttentionOpAccess;

AttentionOpAccess& access(PreparedOp& op) {
  auto* a = dynamic_cast<AttentionOpAccess*>(&op);
  if (!a) throw std::logic_error("op does not implement AttentionOpAccess");
  return *a;
}

OpRequest prefill(Impl impl, DType t, std::uint64_t B, std::uint64_t S, std::uint64_t Hq, std::uint64_t Hkv,
                  std::uint64_t D) {
  return prefill_attention_request({B, Hq, Hkv, S, D}, t, impl, 99 + S);
}

// Our decode_attention_request, as cuDNN's row (impl cudnn); ragged when `dist` is.
OpRequest decode(Impl impl, bool paged, DType t, std::uint64_t B, std::uint64_t Hq, std::uint64_t Hkv, std::uint64_t L,
                 std::uint64_t D, std::uint64_t page_size = 16, const char* dist = "fixed") {
  auto r = decode_attention_request({B, Hq, Hkv, L, D}, t, paged, page_size, 0, 1234 + B * 7 + L);
  r.impl = impl;
  if (std::string(dist) != "fixed") set_decode_steps(r, 1, parse_context_dist(dist));
  return r;
}

bool says(const std::optional<std::string>& why, const std::string& part) {
  return why && why->find(part) != std::string::npos;
}

// Two outputs [rows, D] of two implementations, each within the tolerance of the
// exact answer, so within twice it of each other; atol scaled by each row's RMS.
void expect_agree(const std::vector<float>& got, const std::vector<float>& want_f, std::size_t D, DType t,
                  const std::string& what) {
  const std::vector<double> want(want_f.begin(), want_f.end());
  auto tol = reference::tolerance_for(t);
  tol = {2 * tol.atol, 2 * tol.rtol};
  EXPECT_NO_THROW(reference::check_rows_close(got, want, D, tol, what));
}

// Both kinds and prefill are registered for cuDNN in this build (no device needed).
TEST(CudnnRows, Registered) {
  for (const char* kind : {kPrefillAttention, kDecodeAttention, kDecodeAttentionPaged})
    EXPECT_NE(cuda::all_ops().find(kind, Impl::cudnn), nullptr) << kind;
  // The versions in the device's details (the results' context `libraries`).
  EXPECT_EQ(cuda::library_versions().count("cudnn"), 1u);
  EXPECT_EQ(cuda::library_versions().count("cudnn_frontend"), 1u);
}

// ---- prefill -------------------------------------------------------------------------

struct PrefillCase {
  DType dtype;
  std::uint64_t B, S, Hq, Hkv, D;
};
std::ostream& operator<<(std::ostream& os, const PrefillCase& c) {
  return os << to_string(c.dtype) << " B=" << c.B << " S=" << c.S << " Hq=" << c.Hq << " Hkv=" << c.Hkv
            << " D=" << c.D;
}

class CudnnPrefill : public test::CudaContextTest, public ::testing::WithParamInterface<PrefillCase> {};

TEST_P(CudnnPrefill, MatchesReference) {
  const auto& c = GetParam();
  const auto r = prefill(Impl::cudnn, c.dtype, c.B, c.S, c.Hq, c.Hkv, c.D);
  ASSERT_FALSE(cuda::cannot_run(ctx(), r).has_value()) << *cuda::cannot_run(ctx(), r);
  auto op = cuda::make_op(ctx(), r);
  EXPECT_NO_THROW(op->verify());
}

TEST_P(CudnnPrefill, WrongOutputIsCaught) {
  const auto& c = GetParam();
  auto op = cuda::make_op(ctx(), prefill(Impl::cudnn, c.dtype, c.B, c.S, c.Hq, c.Hkv, c.D));
  access(*op).set_fault_injection(true);
  EXPECT_THROW(op->verify(), VerificationError);
}

// Tails: prompts of 1, off every power of two and of cuDNN's 64/128-row tiles, odd
// batches, GQA 1, 4 and 8, head_dim 64 and 128, both types.
INSTANTIATE_TEST_SUITE_P(Shapes, CudnnPrefill,
                         ::testing::Values(PrefillCase{DType::bf16, 1, 1, 4, 4, 128},
                                           PrefillCase{DType::fp16, 2, 63, 8, 2, 64},
                                           PrefillCase{DType::bf16, 1, 65, 8, 1, 128},
                                           PrefillCase{DType::bf16, 3, 200, 4, 1, 64},
                                           PrefillCase{DType::fp16, 1, 129, 2, 2, 128},
                                           PrefillCase{DType::fp16, 3, 97, 4, 1, 64},
                                           PrefillCase{DType::bf16, 1, 1000, 8, 1, 128}));

using CudnnPrefillMisc = test::CudaContextTest;

// Every output element against our flash kernel on the same data (same seeds).
TEST_F(CudnnPrefillMisc, AgreesWithOurKernelEverywhere) {
  for (const PrefillCase& c : {PrefillCase{DType::bf16, 2, 300, 8, 2, 128}, PrefillCase{DType::fp16, 3, 150, 2, 1, 64}}) {
    auto own = cuda::make_op(ctx(), prefill(Impl::own, c.dtype, c.B, c.S, c.Hq, c.Hkv, c.D));
    auto dnn = cuda::make_op(ctx(), prefill(Impl::cudnn, c.dtype, c.B, c.S, c.Hq, c.Hkv, c.D));
    own->run();
    dnn->run();
    std::ostringstream what;
    what << "cuDNN vs flash, " << c;
    expect_agree(access(*dnn).output_as_float(), access(*own).output_as_float(), c.D, c.dtype, what.str());
  }
}

// head_dim 256 where this cuDNN takes it (its support depends on version and
// architecture), else its refusal is a reason, not an error.
TEST_F(CudnnPrefillMisc, HeadDim256RunsOrIsRefusedWithCudnnsReason) {
  const auto r = prefill(Impl::cudnn, DType::bf16, 1, 77, 4, 1, 256);
  if (auto why = cuda::cannot_run(ctx(), r)) {
    EXPECT_TRUE(says(why, "cuDNN")) << *why;
    GTEST_SKIP() << "this cuDNN refuses head_dim 256 here: " << *why;
  }
  auto op = cuda::make_op(ctx(), r);
  EXPECT_NO_THROW(op->verify());
}

// A shape cuDNN refuses (head_dim not a multiple of 8) is a reason not to run, from
// the plan, carrying cuDNN's message; make_op throws Unsupported (a skipped point).
TEST_F(CudnnPrefillMisc, RefusedShapeIsAReasonNotAnError) {
  const auto r = prefill(Impl::cudnn, DType::bf16, 1, 64, 4, 4, 60);
  const auto why = cuda::cannot_run(ctx(), r);
  EXPECT_TRUE(says(why, "cuDNN refuses prefill attention")) << why.value_or("(runs)");
  EXPECT_THROW(cuda::make_op(ctx(), r), Unsupported);
  // fp32: the registration takes 16-bit types only (no implementation of it here).
  EXPECT_TRUE(cuda::cannot_run(ctx(), prefill(Impl::cudnn, DType::fp32, 1, 64, 4, 4, 64)).has_value());
}

// What the point's JSON records (impl_detail): the library, its versions, the plan chosen.
TEST_F(CudnnPrefillMisc, NotesNameTheLibraryAndItsPlan) {
  auto op = cuda::make_op(ctx(), prefill(Impl::cudnn, DType::bf16, 1, 128, 4, 4, 128));
  const auto n = op->notes();
  EXPECT_EQ(n.at("library"), "cuDNN");
  EXPECT_EQ(n.at("cudnn_version").substr(0, 2), "9.");
  EXPECT_FALSE(n.at("cudnn_frontend_version").empty());
  EXPECT_FALSE(n.at("engine").empty());
  EXPECT_TRUE(n.count("workspace_bytes"));
}

// ---- decode ------------------------------------------------------------------------

struct DecodeCase {
  DType dtype;
  std::uint64_t B, Hq, Hkv, L, D, page_size;
  const char* dist;
};
std::ostream& operator<<(std::ostream& os, const DecodeCase& c) {
  return os << to_string(c.dtype) << " B=" << c.B << " Hq=" << c.Hq << " Hkv=" << c.Hkv << " L=" << c.L
            << " D=" << c.D << " page=" << c.page_size << " " << c.dist;
}

class CudnnDecode : public test::CudaContextTest, public ::testing::WithParamInterface<DecodeCase> {};

TEST_P(CudnnDecode, ContiguousAndPagedMatchReference) {
  const auto& c = GetParam();
  for (const bool paged : {false, true}) {
    const auto r = decode(Impl::cudnn, paged, c.dtype, c.B, c.Hq, c.Hkv, c.L, c.D, c.page_size, c.dist);
    const auto why = cuda::cannot_run(ctx(), r);
    ASSERT_FALSE(why.has_value()) << (paged ? "paged: " : "contiguous: ") << *why;
    auto op = cuda::make_op(ctx(), r);
    EXPECT_NO_THROW(op->verify()) << (paged ? "paged" : "contiguous");
  }
}

TEST_P(CudnnDecode, WrongOutputIsCaught) {
  const auto& c = GetParam();
  for (const bool paged : {false, true}) {
    auto op = cuda::make_op(ctx(), decode(Impl::cudnn, paged, c.dtype, c.B, c.Hq, c.Hkv, c.L, c.D, c.page_size, c.dist));
    access(*op).set_fault_injection(true);
    EXPECT_THROW(op->verify(), VerificationError) << (paged ? "paged" : "contiguous");
  }
}

// Tails: a context of 1, contexts off the page (16, 64) and off 128, the last page
// nearly empty, odd batches, GQA 1, 4 and 8, head_dim 64 and 128, both types, and
// ragged contexts (the padding mask's per-sequence lengths).
INSTANTIATE_TEST_SUITE_P(Shapes, CudnnDecode,
                         ::testing::Values(DecodeCase{DType::bf16, 1, 32, 8, 1, 128, 16, "fixed"},
                                           DecodeCase{DType::fp16, 3, 8, 2, 100, 64, 16, "fixed"},
                                           DecodeCase{DType::bf16, 2, 8, 1, 1000, 128, 16, "fixed"},
                                           DecodeCase{DType::fp16, 5, 4, 4, 129, 128, 64, "fixed"},
                                           DecodeCase{DType::bf16, 1, 32, 8, 4097, 128, 16, "fixed"},
                                           DecodeCase{DType::bf16, 7, 8, 2, 300, 128, 16, "uniform:0.9"},
                                           DecodeCase{DType::fp16, 4, 8, 1, 500, 64, 64, "lognormal:1"}));

using CudnnDecodeMisc = test::CudaContextTest;

// Every output element against our kernels on the same cache (same seeds and block table).
TEST_F(CudnnDecodeMisc, AgreesWithOurKernelsEverywhere) {
  for (const bool paged : {false, true}) {
    const DecodeCase c{DType::bf16, 3, 32, 8, 777, 128, 16, "fixed"};
    auto own = cuda::make_op(ctx(), decode(Impl::own, paged, c.dtype, c.B, c.Hq, c.Hkv, c.L, c.D, c.page_size));
    auto dnn = cuda::make_op(ctx(), decode(Impl::cudnn, paged, c.dtype, c.B, c.Hq, c.Hkv, c.L, c.D, c.page_size));
    own->run();
    dnn->run();
    std::ostringstream what;
    what << "cuDNN vs ours, " << (paged ? "paged " : "contiguous ") << c;
    expect_agree(access(*dnn).output_as_float(), access(*own).output_as_float(), c.D, c.dtype, what.str());
  }
}

// What the row does not implement is a reason not to run, never an error.
TEST_F(CudnnDecodeMisc, RefusalsAreReasons) {
  for (const bool paged : {false, true}) {
    auto fp8 = decode_attention_request({2, 8, 2, 100, 128}, DType::bf16, paged, 16, 0, 7, true);
    fp8.impl = Impl::cudnn;
    EXPECT_TRUE(says(cuda::cannot_run(ctx(), fp8), "fp8 cache"));
    auto multi = decode(Impl::cudnn, paged, DType::bf16, 2, 8, 2, 100, 128);
    set_decode_steps(multi, 4, parse_context_dist("fixed"));
    EXPECT_TRUE(says(cuda::cannot_run(ctx(), multi), "4 new tokens"));
    auto split = decode_attention_request({2, 8, 2, 100, 128}, DType::bf16, paged, 16, 4, 7);
    split.impl = Impl::cudnn;
    EXPECT_TRUE(says(cuda::cannot_run(ctx(), split), "split-KV"));
    EXPECT_THROW(cuda::make_op(ctx(), fp8), Unsupported);
  }
}

TEST_F(CudnnDecodeMisc, NotesNameTheLibraryAndItsPlan) {
  auto op = cuda::make_op(ctx(), decode(Impl::cudnn, true, DType::bf16, 2, 32, 8, 1000, 128));
  const auto n = op->notes();
  EXPECT_EQ(n.at("library"), "cuDNN");
  EXPECT_FALSE(n.at("engine").empty());
}

}  // namespace
}  // namespace phasebench

#endif  // PHASEBENCH_HAVE_CUDNN
