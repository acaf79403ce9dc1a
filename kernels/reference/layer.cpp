// The whole layer's reference steps (layer.hpp), in plain loops: inputs are
// floats decoded from the device's storage and each step's output is rounded
// where the GPU rounds it (between ops); sums are in double.
#include "reference/layer.hpp"

#include <cmath>

#include "common/numeric.hpp"
#include "reference/common.hpp"

namespace phasebench::reference {

float LayerWeights::dec(std::uint16_t b) const {
  return t == DType::bf16 ? numeric::bf16_to_float(b) : numeric::fp16_to_float(b);
}

void layer_linear(const LayerWeights& w, const std::vector<std::uint16_t>& W, const std::vector<float>& x, std::size_t N,
                  std::vector<float>& y, std::vector<double>* abs, bool round_out) {
  const std::size_t K = x.size();
  y.assign(N, 0.f);
  if (abs) abs->assign(N, 0.0);
  for (std::size_t n = 0; n < N; ++n) {
    const std::uint16_t* row = W.data() + n * K;
    double s = 0, a = 0;
    for (std::size_t k = 0; k < K; ++k) {
      const double p = static_cast<double>(x[k]) * w.dec(row[k]);
      s += p;
      a += std::fabs(p);
    }
    y[n] = round_out ? round_to(static_cast<float>(s), w.t) : static_cast<float>(s);
    if (abs) (*abs)[n] = a;
  }
}

std::vector<float> layer_rmsnorm(const LayerWeights& w, const std::vector<float>& x, const std::vector<std::uint16_t>& g,
                                 float eps) {
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = round_to(static_cast<float>(x[i] * inv * w.dec(g[i])), w.t);
  return y;
}

void layer_rope(DType t, float* x, double* abs, int D, int pos, float theta) {
  const float log2_theta = std::log2(theta);
  for (int i = 0; i < D / 2; ++i) {
    const float inv_freq = std::exp2(-static_cast<float>(2 * i) / static_cast<float>(D) * log2_theta);
    const double a = static_cast<double>(static_cast<float>(pos) * inv_freq);
    const double c = std::cos(a), s = std::sin(a);
    const double x1 = x[i], x2 = x[i + D / 2];
    x[i] = round_to(static_cast<float>(x1 * c - x2 * s), t);
    x[i + D / 2] = round_to(static_cast<float>(x2 * c + x1 * s), t);
    const double sc = abs[i] + abs[i + D / 2];
    abs[i] = abs[i + D / 2] = sc;
  }
}

std::vector<float> layer_silu_mul(DType t, const std::vector<float>& gu) {
  const std::size_t I = gu.size() / 2;
  std::vector<float> y(I);
  for (std::size_t i = 0; i < I; ++i) {
    const double g = gu[i], u = gu[I + i];
    y[i] = round_to(static_cast<float>(g / (1.0 + std::exp(-g)) * u), t);
  }
  return y;
}

}  // namespace phasebench::reference
