// KV append (contiguous and paged) through cuda::make_op: every appended
// slot must hold the new token's bits and the slots around them their fill
// value. Skipped, with the reason, where no CUDA device is present.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "cuda/attention_ops.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/kv_append.hpp"
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
