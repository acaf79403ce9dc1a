// The whole-layer elementwise kernels (RMSNorm, NeoX RoPE on a fused QKV
// buffer, SiLU*mul) against plain CPU loops written here. Skipped, with the
// reason, where no CUDA device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/common.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/elementwise.hpp"
#include "gpu_test_util.hpp"
#include "phasebench/error.hpp"

namespace phasebench {
namespace {

using cuda::DeviceBuffer;

class Elementwise : public test::CudaContextTest, public ::testing::WithParamInterface<DType> {};

TEST_P(Elementwise, RmsNormMatchesCpu) {
  const DType t = GetParam();
  const std::size_t es = element_bytes(t);
  for (const auto& [M, H] : {std::pair{1, 8}, {3, 4096}, {7, 5120}, {2, 8200}}) {
    const std::size_t n = static_cast<std::size_t>(M) * H;
    DeviceBuffer x(n * es), w(H * es), out(n * es);
    cuda::fill_random(x.get(), t, n, 11, 1.0f, ctx().stream);
    cuda::fill_random(w.get(), t, H, 12, 1.0f, ctx().stream);
    const float eps = 1e-5f;
    cuda::launch_rmsnorm(t, x.get(), w.get(), out.get(), M, H, eps, ctx().stream);
    const auto xf = cuda::download_as_float(x.get(), t, n, ctx().stream);
    const auto wf = cuda::download_as_float(w.get(), t, H, ctx().stream);
    const auto got = cuda::download_as_float(out.get(), t, n, ctx().stream);
    std::vector<double> want(n);
    for (int m = 0; m < M; ++m) {
      double ss = 0;
      for (int j = 0; j < H; ++j) ss += static_cast<double>(xf[m * H + j]) * xf[m * H + j];
      const double inv = 1.0 / std::sqrt(ss / H + eps);
      for (int j = 0; j < H; ++j) want[m * H + j] = xf[m * H + j] * inv * wf[j];
    }
    EXPECT_NO_THROW(reference::check_close(got, want, reference::tolerance_for(t),
                                           "rmsnorm M=" + std::to_string(M) + " H=" + std::to_string(H)));
  }
}

TEST_P(Elementwise, RopeNeoxRotatesQAndKOnly) {
  const DType t = GetParam();
  const std::size_t es = element_bytes(t);
  struct Case {
    int M, Hq, Hkv, D;
  };
  for (const Case c : {Case{1, 1, 1, 16}, Case{5, 8, 2, 128}, Case{3, 4, 4, 64}, Case{2, 2, 1, 256}}) {
    const int heads = c.Hq + 2 * c.Hkv;
    const std::size_t n = static_cast<std::size_t>(c.M) * heads * c.D;
    DeviceBuffer qkv(n * es), pos(c.M * sizeof(std::int32_t));
    cuda::fill_random(qkv.get(), t, n, 21, 1.0f, ctx().stream);
    std::vector<std::int32_t> positions(c.M);
    for (int m = 0; m < c.M; ++m) positions[m] = m == 0 ? 0 : 300 * m + 7;  // includes position 0 (the identity)
    cuda::upload(pos.get(), positions.data(), pos.bytes(), ctx().stream);
    const auto before = cuda::download_as_float(qkv.get(), t, n, ctx().stream);
    const float theta = 500000.f;
    cuda::launch_rope_neox(t, qkv.get(), pos.as<std::int32_t>(), c.M, c.Hq, c.Hkv, c.D, theta, ctx().stream);
    const auto got = cuda::download_as_float(qkv.get(), t, n, ctx().stream);
    std::vector<double> want(before.begin(), before.end());
    const int half = c.D / 2;
    for (int m = 0; m < c.M; ++m)
      for (int h = 0; h < c.Hq + c.Hkv; ++h) {  // q heads then k heads; v heads stay as they were
        const std::size_t base = (static_cast<std::size_t>(m) * heads + h) * c.D;
        for (int i = 0; i < half; ++i) {
          const double inv_freq = std::pow(static_cast<double>(theta), -2.0 * i / c.D);
          const double a = positions[m] * inv_freq;
          const double x1 = before[base + i], x2 = before[base + i + half];
          want[base + i] = x1 * std::cos(a) - x2 * std::sin(a);
          want[base + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
        }
      }
    EXPECT_NO_THROW(reference::check_close(got, want, reference::tolerance_for(t),
                                           "rope M=" + std::to_string(c.M) + " Hq=" + std::to_string(c.Hq) +
                                               " Hkv=" + std::to_string(c.Hkv) + " D=" + std::to_string(c.D)));
  }
}

TEST_P(Elementwise, SiluMulMatchesCpu) {
  const DType t = GetParam();
  const std::size_t es = element_bytes(t);
  for (const auto& [M, I] : {std::pair{1, 8}, {4, 14336}, {3, 1000}}) {
    const std::size_t n_in = static_cast<std::size_t>(M) * 2 * I, n_out = static_cast<std::size_t>(M) * I;
    DeviceBuffer gu(n_in * es), out(n_out * es);
    cuda::fill_random(gu.get(), t, n_in, 31, 4.0f, ctx().stream);  // |g| up to 4: both tails of the sigmoid
    cuda::launch_silu_mul(t, gu.get(), out.get(), M, I, ctx().stream);
    const auto in = cuda::download_as_float(gu.get(), t, n_in, ctx().stream);
    const auto got = cuda::download_as_float(out.get(), t, n_out, ctx().stream);
    std::vector<double> want(n_out);
    for (int m = 0; m < M; ++m)
      for (int i = 0; i < I; ++i) {
        const double g = in[static_cast<std::size_t>(m) * 2 * I + i];
        const double u = in[static_cast<std::size_t>(m) * 2 * I + I + i];
        want[static_cast<std::size_t>(m) * I + i] = g / (1.0 + std::exp(-g)) * u;
      }
    EXPECT_NO_THROW(reference::check_close(got, want, reference::tolerance_for(t),
                                           "silu_mul M=" + std::to_string(M) + " I=" + std::to_string(I)));
  }
}

TEST_P(Elementwise, UnsupportedShapesThrow) {
  const DType t = GetParam();
  EXPECT_THROW(cuda::launch_rmsnorm(t, nullptr, nullptr, nullptr, 1, 12, 1e-5f, ctx().stream), Unsupported);
  EXPECT_THROW(cuda::launch_rope_neox(t, nullptr, nullptr, 1, 1, 1, 24, 1e4f, ctx().stream), Unsupported);
  EXPECT_THROW(cuda::launch_silu_mul(t, nullptr, nullptr, 1, 12, ctx().stream), Unsupported);
  EXPECT_THROW(cuda::launch_silu_mul(DType::fp32, nullptr, nullptr, 1, 16, ctx().stream), Unsupported);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Elementwise, ::testing::Values(DType::bf16, DType::fp16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(to_string(p.param)); });

}  // namespace
}  // namespace phasebench
