// Verification of a linear layer's device output against reference::linear_element
// (linear_verify.hpp), shared by cuBLASLt and our decode GEMV.
#include "cuda/linear_verify.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "reference/common.hpp"
#include "reference/linear.hpp"
#include "cuda/cuda_common.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cuda {

namespace {

// Sampled indices in [0, n): all of them when n <= count, else the first and
// last `edge` plus random ones, sorted and unique.
std::vector<std::uint64_t> sample_indices(std::uint64_t n, std::uint64_t count, std::uint64_t edge, std::mt19937_64& rng) {
  std::set<std::uint64_t> s;
  if (n <= count) {
    for (std::uint64_t i = 0; i < n; ++i) s.insert(i);
  } else {
    for (std::uint64_t i = 0; i < edge; ++i) {
      s.insert(i);
      s.insert(n - 1 - i);
    }
    std::uniform_int_distribution<std::uint64_t> pick(0, n - 1);
    while (s.size() < count) s.insert(pick(rng));
  }
  return {s.begin(), s.end()};
}

// Download rows `rows` (sorted) of a row-major matrix with `cols` elements per
// row, coalescing consecutive rows into one copy, decoded to floats.
std::vector<float> download_rows(const void* base, DType t, std::uint64_t cols, const std::vector<std::uint64_t>& rows,
                                 cudaStream_t stream) {
  const std::uint64_t e = element_bytes(t);
  std::vector<unsigned char> raw(rows.size() * cols * e);
  for (std::size_t i = 0; i < rows.size();) {
    std::size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    PB_CUDA_CHECK(cudaMemcpyAsync(raw.data() + i * cols * e, static_cast<const unsigned char*>(base) + rows[i] * cols * e,
                                  (j - i) * cols * e, cudaMemcpyDeviceToHost, stream));
    i = j;
  }
  PB_CUDA_CHECK(cudaStreamSynchronize(stream));
  return reference::to_float(raw.data(), t, rows.size() * cols);
}

// Accumulation error allowed per unit of sum|x*w|. The output rounding is
// covered by the output type's rtol; what is left is the accumulation (fp32:
// tiny) and, for tf32, the rounding of the inputs to 10 mantissa bits, and for
// fp8 the tensor cores' reduced-precision accumulation. These are much tighter
// than tolerance_for(bf16).atol * sum|x*w|, which would let a kernel that
// skipped an eighth of K pass at K = 4096.
double accumulation_atol(DType input) {
  switch (input) {
    case DType::tf32: return 2e-3;
    case DType::fp8: return 2e-3;
    case DType::fp32: return 1e-5;
    default: return 2e-4;  // 16-bit inputs, exact products, fp32 accumulation in any order
  }
}

}  // namespace

LinearOperands make_linear_operands(const LinearShape& s, DType input, DType output, std::uint64_t seed,
                                    cudaStream_t stream) {
  LinearOperands o;
  o.X = DeviceBuffer(s.M * s.K * element_bytes(input));
  o.W = DeviceBuffer(s.N * s.K * element_bytes(input));
  o.Y = DeviceBuffer(s.M * s.N * element_bytes(output));
  fill_random(o.X.get(), input, s.M * s.K, seed, 1.0f, stream);
  fill_random(o.W.get(), input, s.N * s.K, seed + 1, 1.0f, stream);
  PB_CUDA_CHECK(cudaMemsetAsync(o.Y.get(), 0xff, o.Y.bytes(), stream));
  PB_CUDA_CHECK(cudaStreamSynchronize(stream));
  return o;
}

void verify_linear(const LinearShape& s, DType input, DType output, const LinearBuffers& b, cudaStream_t stream,
                   const std::string& what) {
  PB_CUDA_CHECK(cudaStreamSynchronize(stream));  // the run being checked has finished
  std::mt19937_64 rng(0x9e3779b97f4a7c15ull ^ (s.M * 1315423911ull) ^ (s.N << 20) ^ s.K);
  const bool full = s.M * s.N * s.K <= (1ull << 27);
  const auto ms = full ? sample_indices(s.M, s.M, 0, rng) : sample_indices(s.M, 32, 2, rng);
  const auto ns = full ? sample_indices(s.N, s.N, 0, rng) : sample_indices(s.N, 128, 16, rng);

  const auto X = download_rows(b.X, input, s.K, ms, stream);
  const auto W = download_rows(b.W, input, s.K, ns, stream);

  // Y: the sampled elements, one row range per sampled m (from the first to the
  // last sampled column), so a huge Y is never downloaded whole.
  const std::uint64_t eo = element_bytes(output);
  const std::uint64_t n_lo = ns.front(), n_span = ns.back() - ns.front() + 1;
  std::vector<unsigned char> yraw(ms.size() * n_span * eo);
  for (std::size_t i = 0; i < ms.size(); ++i)
    PB_CUDA_CHECK(cudaMemcpyAsync(yraw.data() + i * n_span * eo,
                                  static_cast<const unsigned char*>(b.Y) + (ms[i] * s.N + n_lo) * eo, n_span * eo,
                                  cudaMemcpyDeviceToHost, stream));
  PB_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto Yspan = reference::to_float(yraw.data(), output, ms.size() * n_span);

  std::vector<float> got;
  std::vector<double> want, scale;
  got.reserve(ms.size() * ns.size());
  want.reserve(got.capacity());
  scale.reserve(got.capacity());
  for (std::size_t i = 0; i < ms.size(); ++i)
    for (std::size_t j = 0; j < ns.size(); ++j) {
      double abs_sum = 0;
      want.push_back(reference::linear_element(X.data(), W.data(), s.K, i, j, &abs_sum));
      scale.push_back(abs_sum);
      got.push_back(Yspan[i * n_span + (ns[j] - n_lo)]);
    }
  reference::Tolerance tol = reference::tolerance_for(output);
  tol.atol = accumulation_atol(input);
  const std::string label = what + " (" + std::to_string(got.size()) + " elements of Y[" + std::to_string(s.M) + "," +
                            std::to_string(s.N) + "] checked)";
  try {
    reference::check_close(got, want, tol, label, &scale);
  } catch (const VerificationError& e) {
    // Name the first bad element by its (m, n), which check_close cannot know.
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
      if (!(err <= tol.atol * scale[i] + tol.rtol * std::fabs(want[i])))
        throw VerificationError(std::string(e.what()) + "; that is Y[m=" + std::to_string(ms[i / ns.size()]) +
                                ", n=" + std::to_string(ns[i % ns.size()]) + "]");
    }
    throw;
  }
}

}  // namespace phasebench::cuda
