// Verification of a linear layer's device output against reference::linear_element
// (linear_verify.hpp), shared by cuBLASLt and our decode GEMV; the block-scaled
// 4-bit operands' layout, fill and check.
#include "cuda/linear_verify.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "common/numeric.hpp"
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

// Rows `rows` (sorted) of a row-major matrix of `row_bytes` bytes per row, raw,
// consecutive rows coalesced into one copy.
std::vector<unsigned char> download_row_bytes(const void* base, std::uint64_t row_bytes,
                                              const std::vector<std::uint64_t>& rows, cudaStream_t stream) {
  std::vector<unsigned char> raw(rows.size() * row_bytes);
  for (std::size_t i = 0; i < rows.size();) {
    std::size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    PB_CUDA_CHECK(cudaMemcpyAsync(raw.data() + i * row_bytes, static_cast<const unsigned char*>(base) + rows[i] * row_bytes,
                                  (j - i) * row_bytes, cudaMemcpyDeviceToHost, stream));
    i = j;
  }
  PB_CUDA_CHECK(cudaStreamSynchronize(stream));
  return raw;
}

// The same rows decoded to floats.
std::vector<float> download_rows(const void* base, DType t, std::uint64_t cols, const std::vector<std::uint64_t>& rows,
                                 cudaStream_t stream) {
  const auto raw = download_row_bytes(base, cols * element_bytes(t), rows, stream);
  return reference::to_float(raw.data(), t, rows.size() * cols);
}

// Accumulation error allowed per unit of sum|x*w|. The output rounding is
// covered by the output type's rtol; what is left is the accumulation (fp32:
// tiny) and, for tf32, the rounding of the inputs to 10 mantissa bits, and for
// fp8 the tensor cores' reduced-precision accumulation; block-scaled 4-bit
// inputs have exact products too, and get fp8's allowance until Blackwell's
// block-scaled accumulation has been measured. These are much tighter than
// tolerance_for(bf16).atol * sum|x*w|, which would let a kernel that skipped an
// eighth of K pass at K = 4096.
double accumulation_atol(DType input) {
  switch (input) {
    case DType::tf32: return 2e-3;
    case DType::fp8: return 2e-3;
    case DType::nvfp4:
    case DType::mxfp4: return 2e-3;
    case DType::fp32: return 1e-5;
    default: return 2e-4;  // 16-bit inputs, exact products, fp32 accumulation in any order
  }
}

// The elements of Y verify_linear checks: every one when the reference is cheap,
// else a grid that includes the edges.
struct Grid {
  std::vector<std::uint64_t> ms, ns;
};
Grid sample_grid(const LinearShape& s) {
  std::mt19937_64 rng(0x9e3779b97f4a7c15ull ^ (s.M * 1315423911ull) ^ (s.N << 20) ^ s.K);
  const bool full = s.M * s.N * s.K <= (1ull << 27);
  Grid g;
  g.ms = full ? sample_indices(s.M, s.M, 0, rng) : sample_indices(s.M, 32, 2, rng);
  g.ns = full ? sample_indices(s.N, s.N, 0, rng) : sample_indices(s.N, 128, 16, rng);
  return g;
}

// Y's elements on the grid against the reference on the grid's rows of X and W
// (`X`, `W`: those rows as floats, in the grid's order), its dot products times
// `product_scale`, within `tol` (atol per unit of sum|x*w|).
void compare_grid(const LinearShape& s, const Grid& g, const std::vector<float>& X, const std::vector<float>& W,
                  double product_scale, const void* Y, DType output, reference::Tolerance tol, cudaStream_t stream,
                  const std::string& what) {
  const auto& ms = g.ms;
  const auto& ns = g.ns;
  // Y: the sampled elements, one row range per sampled m (from the first to the
  // last sampled column), so a huge Y is never downloaded whole.
  const std::uint64_t eo = element_bytes(output);
  const std::uint64_t n_lo = ns.front(), n_span = ns.back() - ns.front() + 1;
  std::vector<unsigned char> yraw(ms.size() * n_span * eo);
  for (std::size_t i = 0; i < ms.size(); ++i)
    PB_CUDA_CHECK(cudaMemcpyAsync(yraw.data() + i * n_span * eo,
                                  static_cast<const unsigned char*>(Y) + (ms[i] * s.N + n_lo) * eo, n_span * eo,
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
      want.push_back(reference::linear_element(X.data(), W.data(), s.K, i, j, &abs_sum) * product_scale);
      scale.push_back(abs_sum * std::fabs(product_scale));
      got.push_back(Yspan[i * n_span + (ns[j] - n_lo)]);
    }
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

// ---- block-scaled operands ----------------------------------------------------------

std::uint64_t round_up(std::uint64_t v, std::uint64_t to) { return (v + to - 1) / to * to; }

std::uint64_t scale_cols_of(DType t, std::uint64_t K) {
  const auto bs = block_scaling(t);
  if (!bs) throw std::logic_error("block-scaled operands of " + std::string(to_string(t)) + ", not a block-scaled type");
  return (K + bs->block - 1) / bs->block;
}

// Byte j of the packed values seeded `seed`: two non-zero e2m1 codes (magnitudes
// 0.5 to 6) with random signs.
std::uint8_t random_e2m1_pair(std::uint64_t seed, std::uint64_t j) {
  const std::uint64_t h = numeric::mix64(seed * 0x100000001b3ull ^ numeric::mix64(j));
  auto code = [](std::uint64_t bits) {
    return static_cast<unsigned>(1 + (bits & 0xffffu) % 7) | (static_cast<unsigned>(bits >> 16) & 1u) << 3;
  };
  return static_cast<std::uint8_t>(code(h) | code(h >> 32) << 4);
}

// Scale i (row-major over rows x scale columns) seeded `seed`, in a small range:
// nvfp4 e4m3 with exponent field 5 to 8 and any mantissa (0.25 to 3.75), mxfp4
// e8m0 2^-2 to 2^2.
std::uint8_t random_block_scale(DType t, std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t h = numeric::mix64((seed ^ 0x5ca1ab1eull) * 0x9e3779b97f4a7c15ull ^ numeric::mix64(i));
  if (t == DType::nvfp4) return static_cast<std::uint8_t>((5 + h % 4) << 3 | ((h >> 8) & 7u));
  return static_cast<std::uint8_t>(125 + h % 5);
}

// nvfp4's per-tensor scale seeded `seed`: 0.5 to 0.9375 in steps of 1/16.
float random_tensor_scale(std::uint64_t seed) {
  return 0.5f + static_cast<float>(numeric::mix64(seed ^ 0x7e25011ull) % 8) / 16.0f;
}

// `rows` x K packed values seeded `seed`, written in chunks (the host never holds a
// whole large matrix).
void fill_codes(void* dst, std::uint64_t rows, std::uint64_t K, std::uint64_t seed, cudaStream_t stream) {
  const std::uint64_t bytes = rows * (K / 2), chunk = std::uint64_t{32} << 20;
  std::vector<std::uint8_t> host(std::min(bytes, chunk));
  for (std::uint64_t at = 0; at < bytes; at += chunk) {
    const std::uint64_t n = std::min(chunk, bytes - at);
    for (std::uint64_t j = 0; j < n; ++j) host[j] = random_e2m1_pair(seed, at + j);
    upload(static_cast<unsigned char*>(dst) + at, host.data(), n, stream);
  }
}

// The scale tensor of `rows` rows seeded `seed`, in the tiled layout.
void fill_scales(void* dst, DType t, std::uint64_t rows, std::uint64_t K, std::uint64_t seed, cudaStream_t stream) {
  const std::uint64_t cols = scale_cols_of(t, K);
  std::vector<std::uint8_t> host(block_scale_tensor_bytes(rows, cols), 0);
  for (std::uint64_t r = 0; r < rows; ++r)
    for (std::uint64_t c = 0; c < cols; ++c) host[block_scale_offset(r, c, cols)] = random_block_scale(t, seed, r * cols + c);
  upload(dst, host.data(), host.size(), stream);
}

// Rows `rows` (sorted) of a block-scaled matrix of K values a row, dequantised:
// their packed values and, from the tile rows that hold them, their scales.
std::vector<float> download_block_scaled_rows(DType t, const void* codes, const void* scales, std::uint64_t K,
                                              const std::vector<std::uint64_t>& rows, cudaStream_t stream) {
  const std::uint64_t cols = scale_cols_of(t, K);
  const auto packed = download_row_bytes(codes, K / 2, rows, stream);
  // A tile row (128 rows' scales) is contiguous: each one needed, once.
  const std::uint64_t tile_row_bytes = 128 * round_up(cols, 4);
  std::map<std::uint64_t, std::vector<unsigned char>> tile_rows;
  for (auto r : rows) tile_rows[r / 128];
  for (auto& [tr, bytes] : tile_rows) {
    bytes.resize(tile_row_bytes);
    PB_CUDA_CHECK(cudaMemcpyAsync(bytes.data(), static_cast<const unsigned char*>(scales) + tr * tile_row_bytes,
                                  tile_row_bytes, cudaMemcpyDeviceToHost, stream));
  }
  PB_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<std::uint8_t> row_scales(rows.size() * cols);
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::uint64_t c = 0; c < cols; ++c)
      row_scales[i * cols + c] =
          tile_rows.at(rows[i] / 128)[block_scale_offset(rows[i], c, cols) - rows[i] / 128 * tile_row_bytes];
  return reference::dequantize_block_scaled(t, packed.data(), row_scales.data(), rows.size(), K);
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
  const Grid g = sample_grid(s);
  const auto X = download_rows(b.X, input, s.K, g.ms, stream);
  const auto W = download_rows(b.W, input, s.K, g.ns, stream);
  reference::Tolerance tol = reference::tolerance_for(output);
  tol.atol = accumulation_atol(input);
  compare_grid(s, g, X, W, 1.0, b.Y, output, tol, stream, what);
}

std::uint64_t block_scale_tensor_bytes(std::uint64_t rows, std::uint64_t scale_cols) {
  return round_up(rows, 128) * round_up(scale_cols, 4);
}

std::uint64_t block_scale_offset(std::uint64_t row, std::uint64_t col, std::uint64_t scale_cols) {
  const std::uint64_t tiles_along_k = (scale_cols + 3) / 4;
  const std::uint64_t tile = (row / 128) * tiles_along_k + col / 4;
  return tile * 512 + (row % 32) * 16 + (row % 128) / 32 * 4 + col % 4;
}

BlockScaledOperands make_block_scaled_operands(const LinearShape& s, DType t, std::uint64_t seed, cudaStream_t stream) {
  if (s.K % 2) throw std::logic_error("block-scaled operands need an even K (whole bytes a row); got " + std::to_string(s.K));
  const std::uint64_t cols = scale_cols_of(t, s.K);
  BlockScaledOperands o;
  o.type = t;
  o.X = DeviceBuffer(s.M * (s.K / 2));
  o.W = DeviceBuffer(s.N * (s.K / 2));
  o.X_scales = DeviceBuffer(block_scale_tensor_bytes(s.M, cols));
  o.W_scales = DeviceBuffer(block_scale_tensor_bytes(s.N, cols));
  o.Y = DeviceBuffer(s.M * s.N * element_bytes(linear_output_type(t)));
  fill_codes(o.X.get(), s.M, s.K, seed, stream);
  fill_codes(o.W.get(), s.N, s.K, seed + 1, stream);
  fill_scales(o.X_scales.get(), t, s.M, s.K, seed, stream);
  fill_scales(o.W_scales.get(), t, s.N, s.K, seed + 1, stream);
  if (t == DType::nvfp4) {
    o.x_tensor_scale = random_tensor_scale(seed);
    o.w_tensor_scale = random_tensor_scale(seed + 1);
  }
  PB_CUDA_CHECK(cudaMemsetAsync(o.Y.get(), 0xff, o.Y.bytes(), stream));
  PB_CUDA_CHECK(cudaStreamSynchronize(stream));
  return o;
}

void verify_linear_block_scaled(const LinearShape& s, const BlockScaledOperands& o, cudaStream_t stream,
                                const std::string& what) {
  PB_CUDA_CHECK(cudaStreamSynchronize(stream));  // the run being checked has finished
  const Grid g = sample_grid(s);
  const auto X = download_block_scaled_rows(o.type, o.X.get(), o.X_scales.get(), s.K, g.ms, stream);
  const auto W = download_block_scaled_rows(o.type, o.W.get(), o.W_scales.get(), s.K, g.ns, stream);
  reference::Tolerance tol = reference::tolerance_for(o.type);
  tol.atol = accumulation_atol(o.type);
  compare_grid(s, g, X, W, static_cast<double>(o.x_tensor_scale) * o.w_tensor_scale, o.Y.get(),
               linear_output_type(o.type), tol, stream, what);
}

}  // namespace phasebench::cuda
