// Plain reference implementations (reference.hpp) every backend is verified
// against, and the tolerance rules of those comparisons.
#include "reference/common.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

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
    case DType::nvfp4:
    case DType::mxfp4:
    case DType::fp6:
      throw std::logic_error("to_float: " + std::string(to_string(t)) + " is packed with block scales; dequantise it with its own decoder");
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
    case DType::nvfp4:
    case DType::mxfp4:
    case DType::fp6:
      throw std::logic_error("from_float: " + std::string(to_string(t)) + " is packed with block scales; quantise it with its own encoder");
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

Tolerance tolerance_for(DType t) {
  switch (t) {
    case DType::fp32: return {1e-5, 1e-4};
    case DType::tf32: return {2e-3, 4e-3};
    case DType::fp16: return {1e-3, 4e-3};
    case DType::bf16: return {8e-3, 1.6e-2};
    case DType::fp8:
    case DType::int8: return {6e-2, 1.3e-1};
    // Block-scaled 4-bit inputs are dequantised exactly by the reference; what
    // differs is the accumulation order and the bf16 output's rounding.
    case DType::nvfp4:
    case DType::mxfp4:
    case DType::fp6: return {8e-3, 1.6e-2};
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


}  // namespace phasebench::reference
