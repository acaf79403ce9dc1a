// The cuDNN attention rows' device-free part (kernels/cuda/attention_cudnn_layout.hpp):
// the dims and strides their SDPA graphs give cuDNN over our buffers, the block
// table read in place, what they refuse before asking cuDNN, and the version text.
// cuDNN itself runs only in tests/gpu/test_attention_cudnn.cpp, on a device.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "cuda/attention_cudnn_layout.hpp"

using namespace phasebench;
using namespace phasebench::cuda;

namespace {

// Whether `t`, indexed in cuDNN's (b, h, s, d) order, reaches every element of a
// row-major buffer whose index is `ours(b, h, s, d)`, each once.
template <class Ours>
bool reaches_as(const CudnnTensorLayout& t, Ours ours) {
  std::set<std::int64_t> seen;
  for (std::int64_t a = 0; a < t.dim[0]; ++a)
    for (std::int64_t b = 0; b < t.dim[1]; ++b)
      for (std::int64_t c = 0; c < t.dim[2]; ++c)
        for (std::int64_t d = 0; d < t.dim[3]; ++d) {
          const std::int64_t off = cudnn_offset(t, {a, b, c, d});
          if (off != ours(a, b, c, d) || !seen.insert(off).second) return false;
        }
  return static_cast<std::int64_t>(seen.size()) == t.dim[0] * t.dim[1] * t.dim[2] * t.dim[3];
}

bool says(const std::optional<std::string>& why, const std::string& part) {
  return why && why->find(part) != std::string::npos;
}

}  // namespace

// Our q, k, v and out are [B, S, H, D]; cuDNN indexes (b, h, s, d). Tail sizes:
// odd batch, a prompt and head count that are no power of two.
TEST(CudnnLayout, BshdBuffersAsCudnnIndexesThem) {
  const std::int64_t B = 3, S = 5, H = 6, D = 8;
  EXPECT_TRUE(reaches_as(cudnn_bshd(B, S, H, D), [&](std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d) {
    return ((b * S + s) * H + h) * D + d;
  }));
  // Decode's q and out: [B, 1, Hq, D].
  EXPECT_TRUE(reaches_as(cudnn_bshd(B, 1, H, D), [&](std::int64_t b, std::int64_t h, std::int64_t, std::int64_t d) {
    return (b * H + h) * D + d;
  }));
}

// A planted bug the check catches: cuDNN's own packed BHSD strides (what its samples
// give Q) over our BSHD buffer read the wrong heads.
TEST(CudnnLayout, TheSamplesBhsdStridesOverOurBufferAreCaught) {
  const std::int64_t B = 2, S = 5, H = 3, D = 8;
  const CudnnTensorLayout wrong = {{B, H, S, D}, {H * S * D, S * D, D, 1}};
  EXPECT_FALSE(reaches_as(wrong, [&](std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d) {
    return ((b * S + s) * H + h) * D + d;
  }));
}

// The contiguous cache [B, Hkv, L, D] and the page pool [pages, Hkv, P, D] are
// cuDNN's own order; the pool's index is (page, head, token in page, d).
TEST(CudnnLayout, CachesAndPoolAsCudnnIndexesThem) {
  const std::int64_t B = 3, H = 2, L = 37, D = 8, pages = 7, P = 16;
  EXPECT_TRUE(reaches_as(cudnn_bhsd(B, H, L, D), [&](std::int64_t b, std::int64_t h, std::int64_t l, std::int64_t d) {
    return ((b * H + h) * L + l) * D + d;
  }));
  EXPECT_TRUE(reaches_as(cudnn_page_pool(pages, H, P, D),
                         [&](std::int64_t pg, std::int64_t h, std::int64_t t, std::int64_t d) {
                           return ((pg * H + h) * P + t) * D + d;
                         }));
}

// Our block table [B, pages_per_seq] (int32, row-major) is cuDNN's page table
// [B, 1, pages_per_seq, 1] byte for byte: no conversion. Sequence lengths are [B, 1, 1, 1].
TEST(CudnnLayout, BlockTableIsReadInPlace) {
  const std::int64_t B = 3, pps = 5;
  const auto t = cudnn_block_table(B, pps);
  EXPECT_EQ(t.dim, (std::array<std::int64_t, 4>{B, 1, pps, 1}));
  EXPECT_TRUE(reaches_as(t, [&](std::int64_t b, std::int64_t, std::int64_t i, std::int64_t) { return b * pps + i; }));
  EXPECT_TRUE(reaches_as(cudnn_seq_lens(B), [](std::int64_t b, std::int64_t, std::int64_t, std::int64_t) { return b; }));
}

TEST(CudnnLayout, VersionText) {
  EXPECT_EQ(cudnn_version_text(91900), "9.19.0");
  EXPECT_EQ(cudnn_version_text(90501), "9.5.1");
  EXPECT_EQ(cudnn_version_text(100203), "10.2.3");
}

// What the rows refuse before building a graph: a device below sm_80, a type other
// than bf16/fp16, and decode's fp8 cache, several new tokens and our split count.
TEST(CudnnLayout, Refusals) {
  EXPECT_TRUE(says(cudnn_sdpa_device_refusal(7, 5), "8.0 or newer"));
  EXPECT_TRUE(says(cudnn_sdpa_device_refusal(7, 5), "7.5"));
  EXPECT_FALSE(cudnn_sdpa_device_refusal(8, 0).has_value());
  EXPECT_FALSE(cudnn_sdpa_device_refusal(9, 0).has_value());
  EXPECT_FALSE(cudnn_sdpa_device_refusal(12, 0).has_value());
  for (DType t : {DType::bf16, DType::fp16}) EXPECT_FALSE(cudnn_sdpa_dtype_refusal(t).has_value()) << to_string(t);
  for (DType t : {DType::fp32, DType::fp8}) EXPECT_TRUE(says(cudnn_sdpa_dtype_refusal(t), "bf16 or fp16")) << to_string(t);
  EXPECT_FALSE(cudnn_decode_refusal(false, 1, 0).has_value());
  EXPECT_TRUE(says(cudnn_decode_refusal(true, 1, 0), "fp8 cache"));
  EXPECT_TRUE(says(cudnn_decode_refusal(false, 4, 0), "4 new tokens"));
  EXPECT_TRUE(says(cudnn_decode_refusal(false, 1, 8), "split-KV count (8)"));
}
