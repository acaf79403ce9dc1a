// Plain reference implementations (reference.hpp) every backend is verified
// against, and the tolerance rules of those comparisons.
#include "reference/common.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "common/numeric.hpp"
#include "phasebench/error.hpp"

namespace phasebench::reference {

using namespace phasebench::numeric;

std::vector<float> to_float(const void* data, DType t, std::size_t n) {
  std::vector<float> out(n);
  switch (t) {
    case DType::fp32:
    case DType::tf32: std::memcpy(out.data(), data, n * sizeof(float)); break;
    case DType::bf16:
      for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(static_cast<const std::uint16_t*>(data)[i]);
      break;
    case DType::fp16:
      for (std::size_t i = 0; i < n; ++i) out[i] = fp16_to_float(static_cast<const std::uint16_t*>(data)[i]);
      break;
    case DType::fp8:
      for (std::size_t i = 0; i < n; ++i) out[i] = fp8e4m3_to_float(static_cast<const std::uint8_t*>(data)[i]);
      break;
    case DType::int8:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<const std::int8_t*>(data)[i]);
      break;
  }
  return out;
}

void from_float(const float* in, DType t, std::size_t n, void* out) {
  switch (t) {
    case DType::fp32:
    case DType::tf32: std::memcpy(out, in, n * sizeof(float)); break;
    case DType::bf16:
      for (std::size_t i = 0; i < n; ++i) static_cast<std::uint16_t*>(out)[i] = float_to_bf16(in[i]);
      break;
    case DType::fp16:
      for (std::size_t i = 0; i < n; ++i) static_cast<std::uint16_t*>(out)[i] = float_to_fp16(in[i]);
      break;
    case DType::fp8:
      for (std::size_t i = 0; i < n; ++i) static_cast<std::uint8_t*>(out)[i] = float_to_fp8e4m3(in[i]);
      break;
    case DType::int8:
      for (std::size_t i = 0; i < n; ++i)
        static_cast<std::int8_t*>(out)[i] = static_cast<std::int8_t>(std::lround(std::fmax(-127.f, std::fmin(127.f, in[i]))));
      break;
  }
}

float round_to(float v, DType t) {
  float r = 0;
  unsigned char buf[4];
  from_float(&v, t, 1, buf);
  r = to_float(buf, t, 1)[0];
  return r;
}

void fill_random(void* data, DType t, std::size_t n, std::uint64_t seed, float scale) {
  switch (t) {
    case DType::fp32:
    case DType::tf32: {
      auto* p = static_cast<float*>(data);
      for (std::size_t i = 0; i < n; ++i) p[i] = random_value(seed, i, scale);
      break;
    }
    case DType::bf16: {
      auto* p = static_cast<std::uint16_t*>(data);
      for (std::size_t i = 0; i < n; ++i) p[i] = float_to_bf16(random_value(seed, i, scale));
      break;
    }
    case DType::fp16: {
      auto* p = static_cast<std::uint16_t*>(data);
      for (std::size_t i = 0; i < n; ++i) p[i] = float_to_fp16(random_value(seed, i, scale));
      break;
    }
    default: {
      for (std::size_t i = 0; i < n; ++i) {
        const float v = random_value(seed, i, scale);
        from_float(&v, t, 1, static_cast<unsigned char*>(data) + i * element_bytes(t));
      }
    }
  }
}

void fill_int4(std::uint8_t* q, std::uint16_t* scales, std::uint8_t* zeros, std::size_t N, std::size_t K, std::size_t G,
               std::uint64_t seed) {
  auto byte = [](std::uint64_t sd, std::uint64_t i) { return static_cast<std::uint8_t>(numeric::mix64(sd ^ numeric::mix64(i)) >> 24); };
  const std::size_t groups = N * (K / G);
  for (std::size_t i = 0; i < N * K / 2; ++i) q[i] = byte(seed, i);
  for (std::size_t i = 0; i < groups; ++i)
    scales[i] = numeric::float_to_bf16(std::fabs(numeric::random_value(seed + 1, i, 0.125f)));
  for (std::size_t i = 0; i < (groups + 1) / 2; ++i) zeros[i] = byte(seed + 2, i);
}

std::vector<float> int4_weight_row(const std::uint8_t* q, const std::uint16_t* scales, const std::uint8_t* zeros,
                                   std::size_t n, std::size_t K, std::size_t G) {
  std::vector<float> w(K);
  for (std::size_t k = 0; k < K; ++k) {
    const std::size_t gi = n * (K / G) + k / G;
    const int qv = static_cast<int>(numeric::nibble(q, n * K + k)), zv = static_cast<int>(numeric::nibble(zeros, gi));
    w[k] = static_cast<float>(qv - zv) * numeric::bf16_to_float(scales[gi]);
  }
  return w;
}

void check_int4_linear(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& positions, const float* X,
                       const std::uint8_t* q, const std::uint16_t* scales, const std::uint8_t* zeros, std::size_t K,
                       std::size_t G, const std::function<float(std::uint64_t, std::uint64_t)>& got,
                       const std::string& what) {
  std::map<std::uint64_t, std::vector<float>> rows;  // W's rows in use, dequantized once
  std::vector<float> g;
  std::vector<double> want, scale;
  for (const auto& [m, n] : positions) {
    auto it = rows.find(n);
    if (it == rows.end()) it = rows.emplace(n, int4_weight_row(q, scales, zeros, n, K, G)).first;
    double abs_sum = 0;
    want.push_back(linear_element(X + m * K, it->second.data(), K, 0, 0, &abs_sum));
    scale.push_back(abs_sum);
    g.push_back(got(m, n));
  }
  check_close(g, want, tolerance_for(DType::bf16), what, &scale);
}

double linear_element(const float* X, const float* W, std::size_t K, std::size_t m, std::size_t n, double* abs_sum) {
  double acc = 0, abs_acc = 0;
  const float* x = X + m * K;
  const float* w = W + n * K;
  for (std::size_t k = 0; k < K; ++k) {
    const double p = static_cast<double>(x[k]) * static_cast<double>(w[k]);
    acc += p;
    abs_acc += std::fabs(p);
  }
  if (abs_sum) *abs_sum = abs_acc;
  return acc;
}

namespace {
// One query over L keys of width Dk and values of width Dv, in double: the
// softmax of the scaled dot products, then the weighted sum of the values.
void attend(const float* q, std::size_t L, std::size_t Dk, std::size_t Dv, float scale,
            const std::function<const float*(std::size_t)>& key, const std::function<const float*(std::size_t)>& value,
            double* out) {
  std::vector<double> s(L);
  double mx = -1e300;
  for (std::size_t l = 0; l < L; ++l) {
    const float* k = key(l);
    double dot = 0;
    for (std::size_t d = 0; d < Dk; ++d) dot += static_cast<double>(q[d]) * k[d];
    s[l] = dot * scale;
    mx = std::max(mx, s[l]);
  }
  double denom = 0;
  for (auto& x : s) {
    x = std::exp(x - mx);
    denom += x;
  }
  std::fill(out, out + Dv, 0.0);
  for (std::size_t l = 0; l < L; ++l) {
    const float* v = value(l);
    for (std::size_t d = 0; d < Dv; ++d) out[d] += s[l] * v[d];
  }
  for (std::size_t d = 0; d < Dv; ++d) out[d] /= denom;
}

void attend(const float* q, std::size_t L, std::size_t D, float scale,
            const std::function<const float*(std::size_t)>& key, const std::function<const float*(std::size_t)>& value,
            float* out) {
  std::vector<double> acc(D);
  attend(q, L, D, D, scale, key, value, acc.data());
  for (std::size_t d = 0; d < D; ++d) out[d] = static_cast<float>(acc[d]);
}
}  // namespace

std::vector<float> kv_head_scales(std::size_t Hkv) {
  std::vector<float> s(2 * Hkv);
  for (std::size_t h = 0; h < Hkv; ++h) {
    s[h] = 0.375f + 0.0625f * static_cast<float>(h % 9);       // K: 0.375 .. 0.875
    s[Hkv + h] = 1.25f + 0.125f * static_cast<float>(h % 7);  // V: 1.25 .. 2.0
  }
  return s;
}

void decode_attention_head(const float* q, std::size_t L, std::size_t D, float scale,
                           const std::function<const float*(std::size_t)>& key,
                           const std::function<const float*(std::size_t)>& value, float* out) {
  attend(q, L, D, scale, key, value, out);
}

void prefill_attention_row(const float* q, std::size_t i, std::size_t D, float scale,
                           const std::function<const float*(std::size_t)>& key,
                           const std::function<const float*(std::size_t)>& value, float* out) {
  attend(q, i + 1, D, scale, key, value, out);
}

std::vector<std::uint64_t> prefill_rows_to_check(std::uint64_t S, std::uint64_t tile) {
  if (S == 0 || tile == 0) return {};
  const std::uint64_t last_tile = (S - 1) / tile * tile;
  std::vector<std::uint64_t> rows = {0, 1, tile - 1, tile, tile + 1, last_tile, last_tile + 1, S / 2, S - 2, S - 1};
  rows.erase(std::remove_if(rows.begin(), rows.end(), [&](std::uint64_t i) { return i >= S; }), rows.end());
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

Tolerance tolerance_for(DType t) {
  switch (t) {
    case DType::fp32: return {1e-5, 1e-4};
    case DType::tf32: return {2e-3, 4e-3};
    case DType::fp16: return {1e-3, 4e-3};
    case DType::bf16: return {8e-3, 1.6e-2};
    case DType::fp8:
    case DType::int8: return {6e-2, 1.3e-1};
  }
  return {1e-3, 1e-3};
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, Tolerance tol, const std::string& what,
                 const std::vector<double>* scale) {
  if (got.size() != want.size()) throw VerificationError(what + ": output has the wrong number of elements");
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double s = scale ? (*scale)[i] : 1.0;
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol.atol * s + tol.rtol * std::fabs(want[i]))) {  // NaN fails too
      if (bad++ == 0) first = i;
    }
  }
  if (bad) {
    std::ostringstream os;
    os << what << ": " << bad << " of " << got.size() << " checked elements differ from the CPU reference; first at "
       << first << ": got " << got[first] << ", expected " << want[first];
    throw VerificationError(os.str());
  }
}

void check_rows_close(const std::vector<float>& got, const std::vector<double>& want, std::size_t row_len, Tolerance tol,
                      const std::string& what) {
  if (row_len == 0 || want.size() % row_len != 0)
    throw VerificationError(what + ": output is not a whole number of rows of " + std::to_string(row_len));
  std::vector<double> scale(want.size());
  for (std::size_t r0 = 0; r0 < want.size(); r0 += row_len) {
    double ss = 0;
    for (std::size_t i = r0; i < r0 + row_len; ++i) ss += want[i] * want[i];
    std::fill(scale.begin() + static_cast<std::ptrdiff_t>(r0), scale.begin() + static_cast<std::ptrdiff_t>(r0 + row_len),
              std::sqrt(ss / static_cast<double>(row_len)));
  }
  check_close(got, want, tol, what + " (atol scaled by each row's RMS)", &scale);
}

std::vector<std::uint64_t> moe_tokens_to_check(const std::uint32_t* expert, std::size_t T, std::size_t k) {
  std::vector<std::uint64_t> out;
  if (T == 0) return out;
  std::vector<bool> covered;
  for (std::size_t t = 0; t < T; ++t) {
    bool wanted = t == 0 || t + 1 == T;
    for (std::size_t j = 0; j < k; ++j) {
      const auto e = expert[t * k + j];
      if (e >= covered.size()) covered.resize(e + 1, false);
      if (!covered[e]) wanted = true;
    }
    if (!wanted) continue;
    for (std::size_t j = 0; j < k; ++j) covered[expert[t * k + j]] = true;
    out.push_back(t);
  }
  return out;
}

void check_moe(const MoeInputs& in, const std::vector<std::uint64_t>& tokens, DType out_type,
               const std::function<float(std::uint64_t t, std::uint64_t c)>& got, const std::string& what) {
  const std::size_t h = in.h, I = in.I, k = in.k;
  std::vector<std::vector<double>> want(tokens.size(), std::vector<double>(h, 0.0)), scale = want;
  // Few tokens of wide experts: the threads split each expert's rows, not the tokens.
  std::vector<float> x(h);
  std::vector<double> act(I);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto t = tokens[i];
    in.x(t, x.data());
    for (std::size_t j = 0; j < k; ++j) {
      const auto e = in.expert[t * k + j];
      const double w = in.weight[t * k + j];
#pragma omp parallel if (h * I >= (1u << 16))  // threads only for wide experts
      {
        std::vector<float> row(std::max(h, I));
#pragma omp for schedule(static)
        for (std::int64_t r = 0; r < static_cast<std::int64_t>(I); ++r) {
          const auto ri = static_cast<std::size_t>(r);
          in.gate_up(e, ri, row.data());
          double g = 0;
          for (std::size_t c = 0; c < h; ++c) g += static_cast<double>(x[c]) * row[c];
          in.gate_up(e, I + ri, row.data());
          double u = 0;
          for (std::size_t c = 0; c < h; ++c) u += static_cast<double>(x[c]) * row[c];
          act[ri] = g / (1.0 + std::exp(-g)) * u;
        }
#pragma omp for schedule(static)
        for (std::int64_t c = 0; c < static_cast<std::int64_t>(h); ++c) {
          const auto ci = static_cast<std::size_t>(c);
          in.down(e, ci, row.data());
          double y = 0, a = 0;
          for (std::size_t r = 0; r < I; ++r) {
            const double p = act[r] * row[r];
            y += p;
            a += std::fabs(p);
          }
          want[i][ci] += w * y;
          scale[i][ci] += w * a;
        }
      }
    }
  }
  std::vector<float> g;
  std::vector<double> wv, sv;
  g.reserve(tokens.size() * h);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    for (std::size_t c = 0; c < h; ++c) {
      g.push_back(got(tokens[i], c));
      wv.push_back(want[i][c]);
      sv.push_back(scale[i][c]);
    }
  std::ostringstream os;
  os << what << ", token/column = index / " << h << " of tokens";
  for (std::size_t i = 0; i < tokens.size() && i < 8; ++i) os << (i ? "," : " ") << tokens[i];
  if (tokens.size() > 8) os << ",...";
  check_close(g, wv, tolerance_for(out_type), os.str(), &sv);
}


void latent_attention_head(const float* q, std::size_t L, std::size_t R, std::size_t P, float scale,
                           const std::function<const float*(std::size_t)>& latent, double* out) {
  // Keys: the whole latent (nope and rope parts); values: its first R elements.
  attend(q, L, R + P, R, scale, latent, latent, out);
}

}  // namespace phasebench::reference
