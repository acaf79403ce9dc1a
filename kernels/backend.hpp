#pragma once
// The seam between the benchmarks and the hardware. A backend owns memory,
// random fill, the operations, the timer, the device description and its
// ceilings; the fixtures in bench/ only describe what to run (an OpRequest) and
// never know which backend runs it. The CPU backend is the first backend, the
// CUDA backend the second; neither is a special case.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "phasebench/dtype.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/model.hpp"
#include "phasebench/roofline.hpp"
#include "phasebench/workload.hpp"

namespace phasebench {

// What a backend is and what it runs on, for the results file.
struct DeviceInfo {
  std::string backend;  // "cpu" or "cuda"
  std::string name;     // as the driver / OS reports it
  std::string slug;     // file-system-safe, for results/<slug>/
  std::uint64_t memory_bytes = 0;     // total memory usable by the backend
  std::uint64_t cache_bytes = 0;      // last-level cache (L2 on a GPU), for cold-cache flushing
  std::optional<GpuSpec> spec;        // the matched datasheet entry; empty when unknown
  nlohmann::json details = nlohmann::json::object();  // architecture, SMs, clocks, versions, ...
};

// Which implementation of an operation: the backend's own kernel or a vendor
// library, so a sweep can put them side by side.
enum class Impl { own, blas };  // blas = OpenBLAS on the CPU, cuBLAS/cuBLASLt on CUDA
std::string_view to_string(Impl i);
Impl parse_impl(std::string_view s);

// A whole transformer layer's dimensions (OpKind::layer), from a ModelConfig.
struct LayerDims {
  std::uint64_t hidden = 0;        // h
  std::uint64_t intermediate = 0;  // I
  std::uint64_t heads = 0;         // Hq
  std::uint64_t kv_heads = 0;      // Hkv
  std::uint64_t head_dim = 0;      // D
  int norms_per_layer = 2;         // 4 = gemma2's sandwich norms (changes layer_ops)
  static LayerDims of(const ModelConfig& m);
};

// What to prepare: the operation, its shape and element type. Declared as data,
// like an nvbench state; bench/ builds these from the sweep axes.
struct OpRequest {
  OpKind kind = OpKind::linear;
  DType dtype = DType::bf16;  // weights+activations (linear); KV cache+activations (attention, append)
  Impl impl = Impl::own;
  LinearShape linear;               // linear: Y[M,N] = X[M,K] W^T
  AttentionShape attention;         // decode attention, contiguous or paged
  PrefillAttentionShape prefill;    // prefill attention
  KvAppendShape append;             // KV append: write S tokens at position `append_at`
  std::uint64_t append_capacity = 0;  // cache length (tokens) that KV append writes into
  std::uint64_t page_size = 16;       // paged variants
  std::uint64_t splits = 0;           // decode attention split-KV: 0 = the backend decides
  std::uint64_t seed = 0x5eed;
  // Whole layer (OpKind::layer): the model's dimensions and the step. Prefill:
  // batch and prompt are prefill.B and prefill.S; decode: batch and context are
  // attention.B and attention.L (the new token is the L-th: it is appended at
  // position L-1 and attention reads L tokens, as layer_ops counts it). The KV
  // cache of a layer request is contiguous ([B, Hkv, capacity, D]).
  LayerDims layer;
  Phase layer_phase = Phase::decode;
  // The point's name: ops that run several kernels (layer) name the NVTX range
  // of each inside run() "<name>/<op>"; empty = "layer".
  std::string name;
  // Minimum traffic and FLOPs of this request, from workload.hpp.
  OpCost cost() const;
  // Bytes the backend must allocate for it (inputs, outputs, caches).
  std::uint64_t footprint_bytes() const;
};

// For a layer request: the model config its dimensions describe (layers = 1,
// vocab = 0), its step, and the layer's ops from model.hpp's layer_ops (the
// single definition of what a layer runs and costs).
ModelConfig layer_model(const OpRequest& r);
StepShape layer_step(const OpRequest& r);
std::vector<LayerOp> layer_request_ops(const OpRequest& r);

// An operation prepared on a backend: inputs allocated and filled with random
// non-zero data, outputs allocated. Everything costly happens in prepare(),
// outside any timed region.
class PreparedOp {
 public:
  virtual ~PreparedOp() = default;
  // Enqueue one execution (asynchronous on a GPU; the backend's timer synchronises).
  virtual void run() = 0;
  // Run once and compare the output with the CPU reference on random data;
  // throws VerificationError naming the first mismatch.
  virtual void verify() = 0;
  // The output of the last run(), decoded to floats (for tests that compare
  // two implementations on the same data). Backends that cannot provide it throw.
  virtual std::vector<float> output_values();
};

struct TimingOptions {
  bool cold_cache = true;  // flush the last-level cache before each sample, outside the region
  std::string range_name;  // NVTX range around the timed region (the benchmark's name)
};

// One timed sample.
struct Sample {
  double seconds = 0;     // per run() call
  std::uint64_t runs = 1; // run() calls timed together (CUDA graphs of short launches)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const DeviceInfo& device() const = 0;
  // Every known ceiling: datasheet and theoretical ones, plus the measured ones
  // once measure_ceilings() has run.
  virtual Ceilings ceilings() const = 0;
  // Calibrate the measured ceilings (bandwidth; a large GEMM per dtype). Once per process.
  virtual void measure_ceilings(const std::vector<DType>& dtypes) = 0;
  // The measured read bandwidth (bytes/s) once more, by the same method as the
  // ceiling: run after a sweep, it shows whether the machine's bandwidth moved
  // while the sweep ran. Nothing when the backend cannot measure it.
  virtual std::optional<double> remeasure_read_bandwidth() { return std::nullopt; }
  // One streaming read of a buffer of a few times the last-level cache, by the
  // ceiling's method: bytes/s. The fixture times one right before each sample
  // of a large memory-bound point, so each sample has the bandwidth of the same
  // moment beside it (on a shared machine the read ceiling moves by a third
  // within minutes). Nothing when the backend does not offer it.
  virtual std::optional<double> paired_read() { return std::nullopt; }
  // Whether the backend implements this kind of request at all (used to build the sweep).
  virtual bool implements(OpKind kind, DType dtype, Impl impl) const = 0;
  // Why this particular request cannot run here (does not fit in memory, shape
  // not supported by the kernel), or nothing if it can.
  virtual std::optional<std::string> cannot_run(const OpRequest& r) const = 0;
  virtual std::unique_ptr<PreparedOp> prepare(const OpRequest& r) = 0;
  // Why this backend cannot time anything (the CUDA backend built over the
  // functional emulation, kernels/cuda_emu), or nothing. Such a backend still
  // prepares, runs and verifies operations.
  virtual std::optional<std::string> cannot_time() const { return std::nullopt; }
  // One sample: flush (when cold) outside the region, then time the region.
  virtual Sample time(PreparedOp& op, const TimingOptions& opts) = 0;
  // Wait for all work the backend enqueued (a no-op on synchronous backends).
  virtual void synchronize() {}
  // Profile mode: run once inside the NVTX range, between profiler start/stop.
  virtual void profile(PreparedOp& op, const std::string& range_name) = 0;
  // Clocks now (SM and memory, MHz) and throttle reasons, when the backend can read them.
  virtual nlohmann::json clocks() const { return nlohmann::json::object(); }
  // True when the device reported throttling since the last call.
  virtual bool throttled_since_last_check() { return false; }
};

// "cpu", "cuda" or "auto" (CUDA when a device is present, else CPU). `why`
// receives a sentence saying which backend was chosen and why.
std::unique_ptr<Backend> make_backend(const std::string& which, std::string* why);
// Whether this build has the CUDA backend, and whether a CUDA device is present.
bool cuda_backend_built();
std::unique_ptr<Backend> make_cuda_backend(std::string* why);  // nullptr when no device (why says so)
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace phasebench
