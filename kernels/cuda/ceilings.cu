// The CUDA device's ceilings (ceilings.hpp): the streaming-read bandwidth and the
// cuBLASLt GEMM peak measured, and the theoretical peaks from the device's facts.
#include "cuda/ceilings.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include "cuda/linear_cublaslt.hpp"
#include "cuda/linear_verify.hpp"
#include "cuda/stream_read.hpp"

namespace phasebench::cuda {

namespace {

// Best (shortest) time of `runs` timed calls of f after `warmups` untimed ones.
template <class F>
double best_seconds(cudaStream_t stream, int warmups, int runs, F&& f) {
  cudaEvent_t start = nullptr, stop = nullptr;
  PB_CUDA_CHECK(cudaEventCreate(&start));
  if (cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) {
    cudaEventDestroy(start);
    throw_cuda_error(e, "cudaEventCreate(&stop)", __FILE__, __LINE__);
  }
  double best = std::numeric_limits<double>::infinity();
  try {
    for (int i = 0; i < warmups; ++i) f();
    PB_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < runs; ++i) {
      PB_CUDA_CHECK(cudaEventRecord(start, stream));
      f();
      PB_CUDA_CHECK(cudaEventRecord(stop, stream));
      PB_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      PB_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      best = std::min(best, static_cast<double>(ms) * 1e-3);
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(1ull << 30));
  return buf;
}

}  // namespace

std::optional<PerSmRate> per_sm_dense_rate(int cc_major, int cc_minor, DType t) {
  const int cc = cc_major * 10 + cc_minor;
  // Dense (no sparsity) FLOPs per SM per clock = 2 x FMAs, from NVIDIA's
  // architecture whitepapers; tensor-core rates with fp32 accumulation.
  switch (cc) {
    case 80:  // A100: 312 TFLOP/s bf16 = 108 SMs x 1410 MHz x 2048
      if (t == DType::bf16 || t == DType::fp16) return PerSmRate{2048, "sm_80 (A100 whitepaper): 1024 dense fp16/bf16 FMA/clk/SM"};
      if (t == DType::tf32) return PerSmRate{1024, "sm_80 (A100 whitepaper): 512 dense tf32 FMA/clk/SM"};
      if (t == DType::fp32) return PerSmRate{128, "sm_80: 64 fp32 CUDA cores/SM"};
      return std::nullopt;
    case 86:  // GA10x professional parts (A10, A40); GeForce halves fp32-accumulate rates
    case 89:  // Ada professional parts (L4, L40S): L40S 362 TFLOP/s = 142 x 2520 MHz x 1024
      if (t == DType::bf16 || t == DType::fp16)
        return PerSmRate{1024, "sm_" + std::to_string(cc) +
                                   " (Ampere GA10x/Ada whitepapers): 512 dense fp16/bf16 FMA/clk/SM, fp32 accumulate, "
                                   "professional parts (GeForce: half)"};
      if (t == DType::tf32) return PerSmRate{512, "sm_" + std::to_string(cc) + ": 256 dense tf32 FMA/clk/SM"};
      if (t == DType::fp8 && cc == 89) return PerSmRate{2048, "sm_89 (Ada whitepaper): 1024 dense fp8 FMA/clk/SM"};
      if (t == DType::fp32) return PerSmRate{256, "sm_" + std::to_string(cc) + ": 128 fp32 CUDA cores/SM"};
      return std::nullopt;
    case 90:  // H100 SXM: 989 TFLOP/s bf16 = 132 SMs x 1830 MHz x 4096
      if (t == DType::bf16 || t == DType::fp16) return PerSmRate{4096, "sm_90 (H100 whitepaper): 2048 dense fp16/bf16 FMA/clk/SM"};
      if (t == DType::tf32) return PerSmRate{2048, "sm_90 (H100 whitepaper): 1024 dense tf32 FMA/clk/SM"};
      if (t == DType::fp8) return PerSmRate{8192, "sm_90 (H100 whitepaper): 4096 dense fp8 FMA/clk/SM"};
      if (t == DType::fp32) return PerSmRate{256, "sm_90: 128 fp32 CUDA cores/SM"};
      return std::nullopt;
    default: return std::nullopt;
  }
}

Ceilings theoretical_ceilings(const DeviceFacts& f) {
  Ceilings c;
  if (f.memory_bus_width_bits > 0 && f.memory_clock_khz > 0) {
    const double bw = f.memory_bus_width_bits / 8.0 * static_cast<double>(f.memory_clock_khz) * 1e3 * 2.0;
    std::ostringstream os;
    os << "theoretical: " << f.memory_bus_width_bits << "-bit bus / 8 x " << f.memory_clock_khz / 1000
       << " MHz memory clock (cudaDevAttrMemoryClockRate) x 2 (double data rate)";
    c.add_bandwidth(Ceiling{bw, CeilingSource::theoretical, os.str()});
  }
  if (f.sm_count > 0 && f.sm_clock_khz > 0) {
    for (DType t : {DType::fp32, DType::tf32, DType::fp16, DType::bf16, DType::fp8}) {
      const auto rate = per_sm_dense_rate(f.cc_major, f.cc_minor, t);
      if (!rate) continue;
      std::ostringstream os;
      os << "theoretical: " << f.sm_count << " SMs x " << f.sm_clock_khz / 1000
         << " MHz (cudaDevAttrClockRate, the maximum SM clock; datasheets may quote a lower tensor clock) x "
         << rate->flops_per_clock << " dense " << to_string(t) << " FLOP/clk/SM [" << rate->source << "]";
      c.add_compute(t, Ceiling{f.sm_count * static_cast<double>(f.sm_clock_khz) * 1e3 * rate->flops_per_clock,
                               CeilingSource::theoretical, os.str()});
    }
  }
  return c;
}

void measure_bandwidth(Context& ctx, const DeviceFacts& f, Ceilings& out) {
  // At least 8x the L2 and 2 GiB, two such buffers (the copy), within 80% of free memory.
  const std::size_t mib = 1ull << 20;
  const std::size_t wanted = std::max<std::size_t>(8 * f.l2_bytes, 2ull << 30);
  const std::size_t cap = ctx.free_bytes() / 10 * 4;
  const std::size_t bytes = std::min(wanted, cap) / mib * mib;
  if (bytes < 64 * mib) throw std::runtime_error("measure_ceilings: less than 160 MiB of device memory free for the bandwidth buffers");
  DeviceBuffer src(bytes), dst(bytes), sink(sizeof(unsigned));
  // Touch every page and give the read kernel defined contents.
  PB_CUDA_CHECK(cudaMemsetAsync(src.get(), 0x5a, bytes, ctx.stream));
  PB_CUDA_CHECK(cudaMemsetAsync(dst.get(), 0, bytes, ctx.stream));
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  const int runs = 10;
  const std::string size = gib(static_cast<double>(bytes)) + " (" +
                           std::to_string(f.l2_bytes ? bytes / f.l2_bytes : 0) + "x the L2)";

  const double t_read =
      best_seconds(ctx.stream, 2, runs, [&] { stream_read(src.get(), bytes, sink.as<unsigned>(), ctx.sm_count, ctx.stream); });
  out.add_bandwidth(Ceiling{static_cast<double>(bytes) / t_read, CeilingSource::measured,
                            "measured: read kernel over " + size +
                                ", 16-byte loads, grid-stride, 4 loads in flight per thread; bytes = bytes read; best of " +
                                std::to_string(runs) + " after 2 warm-ups"});

  const double t_copy = best_seconds(ctx.stream, 2, runs, [&] {
    PB_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, ctx.stream));
  });
  out.add_bandwidth(Ceiling{2.0 * static_cast<double>(bytes) / t_copy, CeilingSource::measured,
                            "measured: device-to-device cudaMemcpyAsync of " + size +
                                "; bytes = read + written; best of " + std::to_string(runs) + " after 2 warm-ups"});
}

void measure_l2_bandwidth(Context& ctx, const DeviceFacts& f, Ceilings& out) {
  // Half the L2, read again and again: after the warm-ups it is resident, and
  // half leaves room for what the replacement policy keeps of other data.
  const std::size_t bytes = f.l2_bytes / 2 / 4096 * 4096;
  if (bytes < (1u << 20)) return;
  DeviceBuffer buf(bytes), sink(sizeof(unsigned));
  PB_CUDA_CHECK(cudaMemsetAsync(buf.get(), 0x3c, bytes, ctx.stream));
  const int runs = 20;
  const double t = best_seconds(ctx.stream, 3, runs, [&] { stream_read(buf.get(), bytes, sink.as<unsigned>(), ctx.sm_count, ctx.stream); });
  out.add_cache_bandwidth({"L2", Ceiling{static_cast<double>(bytes) / t, CeilingSource::measured,
                                         "measured: read kernel over " + gib(static_cast<double>(bytes)) +
                                             " (half the L2), hot: best of " + std::to_string(runs) + " after 3 warm-ups"}});
}

bool measure_gemm(Context& ctx, DType t, Ceilings& out, std::string* why) {
  auto say = [&](const std::string& s) {
    if (why) *why = s;
    return false;
  };
  if (t == DType::int8) return say("int8: no GEMM ceiling is measured (not benchmarked on the CUDA backend)");
  const DType out_type = linear_output_type(t);
  // 8192^3 unless memory is short; halve until the operands fit in half of free memory.
  std::uint64_t n = 8192;
  const std::size_t free_b = ctx.free_bytes();
  while (n > 1024 && (2 * n * n * element_bytes(t) + n * n * element_bytes(out_type)) > free_b / 2) n /= 2;
  const LinearShape s{n, n, n};
  if (auto bad = cublaslt_linear_unsupported(t, s, ctx.cc_major, ctx.cc_minor)) return say(*bad);
  auto operands = make_linear_operands(s, t, out_type, 0xce11, ctx.stream);
  CublasLtLinear gemm(ctx, t, s, operands.X.get(), operands.W.get(), operands.Y.get());
  // A wrong GEMM must not define a ceiling.
  gemm.run();
  verify_linear(s, t, out_type, operands.view(), ctx.stream, "ceiling GEMM " + gemm.describe());
  const int runs = 10;
  const double sec = best_seconds(ctx.stream, 3, runs, [&] { gemm.run(); });
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  out.add_compute(t, Ceiling{flops / sec, CeilingSource::measured,
                             "measured: " + gemm.describe() + " on random data, best of " + std::to_string(runs) +
                                 " after 3 warm-ups"});
  return true;
}

}  // namespace phasebench::cuda
