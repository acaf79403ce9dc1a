// What the cuDNN attention rows share (attention_cudnn.hpp): the handle per device,
// building an SDPA graph into its execution plan, running it, and its notes.
#include "cuda/attention_cudnn.hpp"

#include <exception>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cuda/cuda_op.hpp"

namespace phasebench::cuda {

namespace fe = cudnn_frontend;

namespace {

// The process's cuDNN handle on `device`, made on first use and never destroyed
// (as the CUDA backend's own handles in the tests: tearing one down from a static
// destructor, after the CUDA runtime has begun unloading, is not safe). Each run
// binds it to its context's stream. Nothing when cudnnCreate fails (`why` says why).
cudnnHandle_t handle_for(int device, std::string& why) {
  static std::mutex m;
  static std::map<int, cudnnHandle_t> handles;
  const std::lock_guard<std::mutex> lock(m);
  if (const auto it = handles.find(device); it != handles.end()) return it->second;
  int current = 0;
  PB_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) PB_CUDA_CHECK(cudaSetDevice(device));
  cudnnHandle_t h = nullptr;
  const cudnnStatus_t s = cudnnCreate(&h);
  if (current != device) PB_CUDA_CHECK(cudaSetDevice(current));
  if (s != CUDNN_STATUS_SUCCESS) {
    why = std::string("cuDNN: cudnnCreate failed: ") + cudnnGetErrorString(s);
    return nullptr;
  }
  handles.emplace(device, h);
  return h;
}

std::vector<std::int64_t> vec(const std::array<std::int64_t, 4>& a) { return {a.begin(), a.end()}; }

}  // namespace

std::shared_ptr<fe::graph::Graph> new_cudnn_sdpa_graph(DType t) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(t == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Tensor_attributes> cudnn_tensor(fe::graph::Graph& g, const char* name, std::int64_t uid,
                                                           const CudnnTensorLayout& layout, bool int32) {
  auto a = fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(vec(layout.dim)).set_stride(vec(layout.stride));
  if (int32) a.set_data_type(fe::DataType_t::INT32);
  return g.tensor(a);
}

void cudnn_output(fe::graph::Tensor_attributes& t, std::int64_t uid, const CudnnTensorLayout& layout) {
  t.set_output(true).set_uid(uid).set_dim(vec(layout.dim)).set_stride(vec(layout.stride));
}

std::optional<std::string> build_cudnn_sdpa(std::shared_ptr<fe::graph::Graph> g, const Context& ctx,
                                            const std::string& what, CudnnSdpaGraph& out) {
  std::string why;
  cudnnHandle_t h = handle_for(ctx.device, why);
  if (!h) return why;
  // Each step's error is cuDNN's refusal of this graph on this device: the point's
  // reason not to run (a skipped point with cuDNN's message), never a sweep error.
  auto refused = [&](const char* step, fe::error_t e) -> std::optional<std::string> {
    if (e.is_good()) return std::nullopt;
    return "cuDNN refuses " + what + " (" + step + "): " + e.get_message();
  };
  try {
    if (auto r = refused("validate", g->validate())) return r;
    if (auto r = refused("build_operation_graph", g->build_operation_graph(h))) return r;
    if (auto r = refused("create_execution_plans", g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK})))
      return r;
    if (auto r = refused("check_support", g->check_support())) return r;
    if (auto r = refused("build_plans", g->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE))) return r;
    std::int64_t ws = 0;
    if (auto r = refused("get_workspace_size", g->get_workspace_size(ws))) return r;
    std::string name;
    if (auto r = refused("get_plan_name", g->get_plan_name(name))) return r;
    out.graph = std::move(g);
    out.handle = h;
    out.engine = name;
    out.workspace_bytes = ws > 0 ? static_cast<std::uint64_t>(ws) : 0;
  } catch (const std::exception& e) {  // the frontend throws on some malformed graphs
    return "cuDNN refuses " + what + ": " + e.what();
  }
  return std::nullopt;
}

void run_cudnn_sdpa(const CudnnSdpaGraph& g, std::unordered_map<std::int64_t, void*>& pack, void* workspace,
                    const Context& ctx) {
  const cudnnStatus_t s = cudnnSetStream(g.handle, ctx.stream);
  if (s != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string("cudnnSetStream failed: ") + cudnnGetErrorString(s));
  auto e = g.graph->execute(g.handle, pack, workspace);
  if (e.is_bad()) throw std::runtime_error("cuDNN SDPA (" + g.engine + ") failed to execute: " + e.get_message());
}

namespace {
std::string frontend_version() {
  return std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
}
}  // namespace

void register_cudnn_versions() {
  library_versions()["cudnn"] = cudnn_version_text(cudnnGetVersion());  // host-only: no device needed
  library_versions()["cudnn_frontend"] = frontend_version();
}

std::map<std::string, std::string> cudnn_sdpa_notes(const CudnnSdpaGraph& g) {
  return {{"library", "cuDNN"},
          {"cudnn_version", cudnn_version_text(cudnnGetVersion())},
          {"cudnn_header_version", cudnn_version_text(CUDNN_VERSION)},
          {"cudnn_frontend_version", frontend_version()},
          {"engine", g.engine},
          {"workspace_bytes", std::to_string(g.workspace_bytes)}};
}

}  // namespace phasebench::cuda
