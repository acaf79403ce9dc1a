// KV append (contiguous and paged) through cuda::make_op: every appended
// slot must hold the new token's bits and the slots around them their fill
// value, paged appends at every kind of offset in pages of 16 to 80 tokens.
// Skipped, with the reason, where no CUDA device is present.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/kv_append.hpp"
#include "cuda/kv_append_plan.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/kv_append.hpp"

namespace phasebench {
namespace {

OpRequest append_request(bool paged, DType dt, std::uint64_t B, std::uint64_t S, std::uint64_t Hkv, std::uint64_t D,
                         std::uint64_t capacity, std::uint64_t page_size = 16) {
  return kv_append_request({B, S, Hkv, D}, dt, capacity, paged, page_size, 4321 + capacity);
}

cuda::AttentionOpAccess& access(PreparedOp& op) {
  auto* a = dynamic_cast<cuda::AttentionOpAccess*>(&op);
  if (!a) throw std::logic_error("op does not implement AttentionOpAccess");
  return *a;
}

TEST(KvAppendHost, UnsupportedShapesSayWhatIsSupported) {
  EXPECT_NE(cuda::kv_append_unsupported(DType::bf16, 12, false, 16).value_or("").find("multiple of 8"), std::string::npos);
  EXPECT_NE(cuda::kv_append_unsupported(DType::bf16, 128, true, 8).value_or("").find("multiple of 16"), std::string::npos);
  EXPECT_NE(cuda::kv_append_unsupported(DType::fp32, 128, false, 16).value_or("").find("bf16 or fp16"), std::string::npos);
  EXPECT_FALSE(cuda::kv_append_unsupported(DType::fp16, 128, true, 48).has_value());
}

struct AppendCase {
  DType dtype;
  std::uint64_t B, S, Hkv, D, capacity, page_size;
};
std::ostream& operator<<(std::ostream& os, const AppendCase& c) {
  return os << to_string(c.dtype) << " B=" << c.B << " S=" << c.S << " Hkv=" << c.Hkv << " D=" << c.D
            << " capacity=" << c.capacity << " page=" << c.page_size;
}

class KvAppend : public test::CudaContextTest, public ::testing::WithParamInterface<AppendCase> {};

TEST_P(KvAppend, ContiguousWritesExactlyTheNewTokens) {
  const auto& c = GetParam();
  auto op = cuda::make_op(ctx(), append_request(false, c.dtype, c.B, c.S, c.Hkv, c.D, c.capacity, c.page_size));
  EXPECT_NO_THROW(op->verify());
  op->run();  // idempotent: appending the same tokens again changes nothing
  EXPECT_NO_THROW(op->verify());
}

TEST_P(KvAppend, PagedWritesExactlyTheNewTokens) {
  const auto& c = GetParam();
  auto op = cuda::make_op(ctx(), append_request(true, c.dtype, c.B, c.S, c.Hkv, c.D, c.capacity, c.page_size));
  EXPECT_NO_THROW(op->verify());
}

TEST_P(KvAppend, WrongCacheContentIsCaught) {
  const auto& c = GetParam();
  for (const bool paged : {false, true}) {
    auto op = cuda::make_op(ctx(), append_request(paged, c.dtype, c.B, c.S, c.Hkv, c.D, c.capacity, c.page_size));
    access(*op).set_fault_injection(true);
    EXPECT_THROW(op->verify(), VerificationError) << (paged ? "paged" : "contiguous");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, KvAppend,
    ::testing::Values(AppendCase{DType::bf16, 3, 1, 8, 128, 1000, 16},   // decode step, capacity not a page multiple
                      AppendCase{DType::fp16, 2, 17, 2, 64, 17, 16},     // whole cache written (pos 0), 2nd page partial
                      AppendCase{DType::bf16, 1, 5, 4, 256, 4097, 16},   // D=256, append spans a page boundary
                      AppendCase{DType::bf16, 10, 1, 8, 128, 512, 48},   // B > 8 (sampled batches), page 48
                      AppendCase{DType::fp16, 2, 200, 2, 128, 1000, 32}  // prefill-style append of 200 tokens
                      ));

// ---- paged appends at every kind of offset in a page -----------------------------------
//
// The op appends S tokens at positions capacity - S .. capacity - 1; the kernel finds each
// token's page (t / P through the block table) and slot (t % P). Pages of 16 and 32 (powers
// of two) and 48 and 80 (not); appends that start on a page's first, second, middle and
// last slot (in its third page) with 1, 2, 7, P - 1 and P + 3 tokens: appends within a page,
// ending mid-page, crossing one page boundary and spanning a whole page to end mid-page in
// the next but one. verify() also reads the 16 slots before the append and the slots after
// it in its last page, so a token written one slot off is caught either way.
struct PagedAppendCase {
  DType dtype;
  std::uint64_t B, Hkv, D, page_size;
};
std::ostream& operator<<(std::ostream& os, const PagedAppendCase& c) {
  return os << to_string(c.dtype) << " B=" << c.B << " Hkv=" << c.Hkv << " D=" << c.D << " page=" << c.page_size;
}

class KvAppendPageOffsets : public test::CudaContextTest, public ::testing::WithParamInterface<PagedAppendCase> {};

TEST_P(KvAppendPageOffsets, PagedWritesExactlyTheNewTokens) {
  const auto& c = GetParam();
  const std::uint64_t P = c.page_size;
  for (const std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{1}, P / 2, P - 1})
    for (const std::uint64_t S : {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{7}, P - 1, P + 3}) {
      const std::uint64_t pos = 2 * P + offset, capacity = pos + S;
      SCOPED_TRACE(::testing::Message() << "S=" << S << " at positions " << pos << ".." << capacity - 1 << " (slot "
                                        << offset << " of page 2 to slot " << (capacity - 1) % P << " of page "
                                        << (capacity - 1) / P << ")");
      auto op = cuda::make_op(ctx(), append_request(true, c.dtype, c.B, S, c.Hkv, c.D, capacity, P));
      EXPECT_NO_THROW(op->verify());
    }
}

INSTANTIATE_TEST_SUITE_P(
    Pages, KvAppendPageOffsets,
    ::testing::Values(PagedAppendCase{DType::bf16, 3, 2, 64, 16}, PagedAppendCase{DType::fp16, 2, 3, 128, 32},
                      PagedAppendCase{DType::fp16, 3, 2, 64, 48},   // not a power of two
                      PagedAppendCase{DType::bf16, 2, 1, 256, 80})); // not a power of two, D=256

using KvAppendMisc = test::CudaContextTest;

TEST_F(KvAppendMisc, UnsupportedRequestsThrowUnsupported) {
  EXPECT_THROW(cuda::make_op(ctx(), append_request(false, DType::bf16, 1, 1, 8, 12, 100)), Unsupported);
  EXPECT_THROW(cuda::make_op(ctx(), append_request(true, DType::bf16, 1, 1, 8, 128, 100, 8)), Unsupported);
  EXPECT_THROW(cuda::make_op(ctx(), append_request(false, DType::bf16, 1, 10, 8, 128, 5)), Unsupported);
  auto blas = append_request(false, DType::bf16, 1, 1, 8, 128, 100);
  blas.impl = Impl::blas;
  EXPECT_THROW(cuda::make_op(ctx(), blas), Unsupported);
}

}  // namespace
}  // namespace phasebench
