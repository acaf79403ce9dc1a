// The whole-layer PreparedOp (see layer.hpp) and one GPU's shard of a layer
// (layer_shard.hpp), built from the request's plan (layer_plan.hpp). A shard's
// constructor allocates and fills everything (weights scaled by 1/sqrt(fan-in)
// so activations stay of order one through the layer), builds the four cuBLASLt
// matmuls and the kernels' parameters, and synchronises; run() only enqueues;
// verify() runs once and checks a few tokens' outputs against a CPU reference
// of the whole layer (reference/layer.hpp's steps, reference/decode_attention.hpp's
// attention). The one-GPU op is one shard; the tensor-parallel op is layer_tp.cpp.
#include "cuda/layer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "reference/common.hpp"
#include "reference/decode_attention.hpp"
#include "reference/layer.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/cuda_op.hpp"
#include "cuda/decode_attention.hpp"
#include "cuda/elementwise.hpp"
#include "cuda/kv_append.hpp"
#include "cuda/layer.cuh"
#include "cuda/layer_plan.hpp"
#include "cuda/layer_shard.hpp"
#include "cuda/linear_cublaslt.hpp"
#include "cuda/prefill_attention.hpp"
#include "phasebench/error.hpp"
#include "phasebench/nvtx.hpp"
#include "phasebench/ops/layer.hpp"
#include "phasebench/processes.hpp"

namespace phasebench::cuda {

namespace {

constexpr float kNormEps = 1e-5f;
constexpr float kRopeTheta = 500000.0f;  // Llama 3's rope_theta (the value does not change the cost)

// Seeds of the layer's buffers, distinct per buffer, derived from the request's seed.
enum class Buf : std::uint64_t { x = 11, attn_norm = 12, qkv = 13, o = 14, mlp_norm = 15, gate_up = 16, down = 17, k = 18, v = 19 };

void launch_qkv_split(const void* qkv, void* q, void* k, void* v, int M, int Nq, int Nkv, cudaStream_t stream) {
  const unsigned long long n = static_cast<unsigned long long>(M) * (Nq + 2 * Nkv) / 8;
  if (n >= (1ull << 32)) throw Unsupported("qkv_split: too many elements for one launch");
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  qkv_split_kernel<<<blocks, threads, 0, stream>>>(static_cast<const uint4*>(qkv), static_cast<uint4*>(q),
                                                   static_cast<uint4*>(k), static_cast<uint4*>(v),
                                                   static_cast<unsigned>(n), Nq / 8, Nkv / 8);
  PB_CUDA_CHECK_LAUNCH("qkv_split_kernel");
}

// Seeds of a shard's buffers: the norms' scales and the input alike on every
// rank (replicated), the projections' and the cache's per rank.
std::uint64_t seed_of(std::uint64_t seed, Buf b, int rank) {
  const bool replicated = b == Buf::x || b == Buf::attn_norm || b == Buf::mlp_norm;
  return buffer_seed(seed, static_cast<std::uint64_t>(b) + (replicated ? 0 : 100ull * static_cast<std::uint64_t>(rank)));
}

// ---- one GPU's shard ----------------------------------------------------------------

}  // namespace

LayerShard::LayerShard(Context& ctx, const OpRequest& r, const LayerPlan& plan, int rank)
    : ctx_(ctx), r_(r), prefill_(plan.prefill), B_(plan.B), S_(plan.S), M_(plan.M), L_(plan.L), h_(plan.h),
      I_(plan.I), Hq_(plan.Hq), Hkv_(plan.Hkv), D_(plan.D), Nq_(plan.Nq), Nkv_(plan.Nkv), cap_(plan.cap),
      pos_(plan.pos), chunk_(plan.split.chunk), splits_(plan.split.splits), rank_(rank), gpus_(plan.gpus) {
  prefix_ = r.name.empty() ? std::string("layer") : r.name;
  if (rank > 0) prefix_ += "/rank" + std::to_string(rank);
  allocate_and_fill(plan.split.workspace_floats, rank);
  make_matmuls();
  set_kernel_params(plan.split.workspace_floats);
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

void LayerShard::enqueue_attention() {
  const DType t = r_.dtype;
  const auto s = ctx_.stream;
  {
    auto range = nvtx_range(this->range("attn_norm"));
    launch_rmsnorm(t, x_.get(), w_attn_norm_.get(), xn_.get(), M_, h_, kNormEps, s);
  }
  {
    auto range = nvtx_range(this->range("qkv_proj"));
    qkv_proj_->run();
  }
  {
    auto range = nvtx_range(this->range("rope"));
    launch_rope_neox(t, qkv_.get(), positions_.as<std::int32_t>(), M_, Hq_, Hkv_, D_, kRopeTheta, s);
  }
  {
    auto range = nvtx_range(this->range("qkv_split"));
    launch_qkv_split(qkv_.get(), q_.get(), k_new_.get(), v_new_.get(), M_, Nq_, Nkv_, s);
  }
  {
    auto range = nvtx_range(this->range("kv_append"));
    launch_kv_append(ap_, s);
  }
  {
    auto range = nvtx_range(this->range("attention"));
    if (prefill_)
      launch_prefill_flash(pp_, s);
    else
      launch_decode_attention(dp_, chunk_, s);
  }
  {
    auto range = nvtx_range(this->range("o_proj"));
    o_proj_->run();
  }
}

void LayerShard::enqueue_mlp() {
  const DType t = r_.dtype;
  const auto s = ctx_.stream;
  {
    auto range = nvtx_range(this->range("mlp_norm"));
    launch_rmsnorm(t, o_.get(), w_mlp_norm_.get(), xn2_.get(), M_, h_, kNormEps, s);
  }
  {
    auto range = nvtx_range(this->range("gate_up_proj"));
    gate_up_proj_->run();
  }
  {
    auto range = nvtx_range(this->range("act_mul"));
    launch_silu_mul(t, gate_up_.get(), act_.get(), M_, I_, s);
  }
  {
    auto range = nvtx_range(this->range("down_proj"));
    down_proj_->run();
  }
}

std::string LayerShard::describe() const {
  std::ostringstream os;
  os << (prefill_ ? "prefill" : "decode") << " " << to_string(r_.dtype) << " B=" << B_ << (prefill_ ? " S=" : " L=")
     << L_ << " h=" << h_ << " I=" << I_ << " Hq=" << Hq_ << " Hkv=" << Hkv_ << " D=" << D_;
  if (!prefill_) os << " splits=" << splits_;
  if (gpus_ > 1) os << " over " << gpus_ << " GPUs, rank " << rank_;
  return os.str();
}

reference::LayerWeights LayerShard::weights() {
  reference::LayerWeights w{r_.dtype, {}, {}, {}, {}, {}, {}};
  auto all_of = [&](const DeviceBuffer& b) { return download_u16(b.get(), b.bytes() / 2, ctx_.stream); };
  w.attn_norm = all_of(w_attn_norm_);
  w.qkv = all_of(w_qkv_);
  w.o = all_of(w_o_);
  w.mlp_norm = all_of(w_mlp_norm_);
  w.gate_up = all_of(w_gate_up_);
  w.down = all_of(w_down_);
  return w;
}

std::vector<float> LayerShard::input_row(std::size_t m) {
  const std::size_t h = static_cast<std::size_t>(h_);
  return download_as_float(byte_ptr(x_.get(), m * h, element_bytes(r_.dtype)), r_.dtype, h, ctx_.stream);
}

std::vector<float> LayerShard::output_row(std::size_t m) {
  const std::size_t h = static_cast<std::size_t>(h_);
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  return download_as_float(byte_ptr(out_.get(), m * h, element_bytes(r_.dtype)), r_.dtype, h, ctx_.stream);
}

std::vector<float> LayerShard::output_all() {
  PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  return download_as_float(out_.get(), r_.dtype, hidden_elements(), ctx_.stream);
}

// The token's qkv_proj and rope through the reference; its K and V in this
// shard's cache and its attention output against it; o_proj's partial output.
std::vector<float> LayerShard::reference_attention_part(const reference::LayerWeights& w, const std::vector<float>& xn,
                                                        int b, int s, const reference::Tolerance& tol, std::string& wrong) {
  // A mismatch is kept (the first) and the reference goes on: over processes
  // every rank must reach the sums of the partial outputs.
  auto check = [&](const auto& compare) {
    try {
      compare();
    } catch (const VerificationError& e) {
      if (wrong.empty()) wrong = e.what();
    }
  };
  const DType t = r_.dtype;
  const std::size_t es = element_bytes(t);
  const std::size_t h = static_cast<std::size_t>(h_), D = static_cast<std::size_t>(D_),
                    Nq = static_cast<std::size_t>(Nq_), Nkv = static_cast<std::size_t>(Nkv_), Nqkv = Nq + 2 * Nkv;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const int G = Hq_ / Hkv_;
  const std::size_t m = static_cast<std::size_t>(b) * S_ + s;
  const int pos = prefill_ ? s : pos_;  // cache position (and RoPE position) of the token
  const std::size_t ctx_len = static_cast<std::size_t>(pos) + 1;
  std::ostringstream where;
  where << describe() << ", sequence " << b << ", token " << s << " (position " << pos << ")";

  std::vector<float> qkv;
  std::vector<double> qkv_abs;
  reference::layer_linear(w, w.qkv, xn, Nqkv, qkv, &qkv_abs);
  for (int head = 0; head < Hq_ + Hkv_; ++head)
    reference::layer_rope(t, qkv.data() + head * D, qkv_abs.data() + head * D, D_, pos, kRopeTheta);

  // This sequence's K and V cache rows [Hkv][ctx_len][D], read back from the device.
  std::vector<float> K, V;
  for (int which = 0; which < 2; ++which) {
    const void* cache = which == 0 ? k_cache_.get() : v_cache_.get();
    std::vector<unsigned char> raw(Hkv_ * ctx_len * D * es);
    PB_CUDA_CHECK(cudaMemcpy2DAsync(raw.data(), ctx_len * D * es,
                                    byte_ptr(cache, static_cast<std::size_t>(b) * Hkv_ * cap_ * D, es),
                                    static_cast<std::size_t>(cap_) * D * es, ctx_len * D * es, Hkv_,
                                    cudaMemcpyDeviceToHost, ctx_.stream));
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    (which == 0 ? K : V) = reference::to_float(raw.data(), t, raw.size() / es);
  }
  // The token's own K and V slots against the reference (qkv_proj, rope, split, append).
  for (int which = 0; which < 2; ++which) {
    const std::vector<float>& cache = which == 0 ? K : V;
    const std::size_t off = Nq + (which == 0 ? 0 : Nkv);
    std::vector<float> got(Nkv);
    for (int hk = 0; hk < Hkv_; ++hk)
      for (std::size_t d = 0; d < D; ++d) got[hk * D + d] = cache[(hk * ctx_len + pos) * D + d];
    const std::vector<double> want(qkv.begin() + static_cast<std::ptrdiff_t>(off),
                                   qkv.begin() + static_cast<std::ptrdiff_t>(off + Nkv));
    const std::vector<double> sc(qkv_abs.begin() + static_cast<std::ptrdiff_t>(off),
                                 qkv_abs.begin() + static_cast<std::ptrdiff_t>(off + Nkv));
    check([&] {
      reference::check_close(got, want, tol,
                             where.str() + ": its " + (which == 0 ? "K" : "V") + " in the cache (elements are kv_head * D + d)",
                             &sc);
    });
  }
  // attention: keys 0..pos, the token's own from the reference, the others from the cache.
  const float* own_k = qkv.data() + Nq;
  const float* own_v = qkv.data() + Nq + Nkv;
  std::vector<float> attn(Nq);
  for (int hq = 0; hq < Hq_; ++hq) {
    const std::size_t hk = static_cast<std::size_t>(hq / G);
    auto key = [&](std::size_t l) {
      return l == static_cast<std::size_t>(pos) ? own_k + hk * D : K.data() + (hk * ctx_len + l) * D;
    };
    auto value = [&](std::size_t l) {
      return l == static_cast<std::size_t>(pos) ? own_v + hk * D : V.data() + (hk * ctx_len + l) * D;
    };
    reference::decode_attention_head(qkv.data() + hq * D, ctx_len, D, scale, key, value, attn.data() + hq * D);
  }
  for (float& a : attn) a = reference::round_to(a, t);
  {
    const std::vector<float> got = download_as_float(byte_ptr(attn_.get(), m * Nq, es), t, Nq, ctx_.stream);
    // Per-head RMS-scaled atol: a wrong softmax (scale, a missing token) moves
    // the outputs by less than a fixed atol at long contexts. The kernels' own
    // error (P rounding, 1-ulp differences of q and k) is a small fraction of
    // that RMS; the output rounding is rtol's.
    check([&] {
      reference::check_rows_close(got, std::vector<double>(attn.begin(), attn.end()), D, tol,
                                  where.str() + ": attention output (elements are q_head * D + d)");
    });
  }
  std::vector<float> o;
  reference::layer_linear(w, w.o, attn, h, o, nullptr);
  return o;
}

std::vector<float> LayerShard::reference_mlp_part(const reference::LayerWeights& w, const std::vector<float>& xn2,
                                                  std::vector<double>& abs, bool round_out) {
  const std::size_t h = static_cast<std::size_t>(h_), I = static_cast<std::size_t>(I_);
  std::vector<float> gu, out;
  reference::layer_linear(w, w.gate_up, xn2, 2 * I, gu, nullptr);
  const std::vector<float> act = reference::layer_silu_mul(r_.dtype, gu);
  reference::layer_linear(w, w.down, act, h, out, &abs, round_out);
  return out;
}

// Every buffer of the shard (none reused), weights scaled by 1/sqrt(fan-in),
// the cache filled as earlier tokens' K and V, activations zeroed, positions.
void LayerShard::allocate_and_fill(std::size_t ws_floats, int rank) {
  const DType t = r_.dtype;
  const std::uint64_t seed = r_.seed;
  const auto s = ctx_.stream;
  const std::size_t es = element_bytes(t), M = static_cast<std::size_t>(M_), h = static_cast<std::size_t>(h_),
                    I = static_cast<std::size_t>(I_), Nq = static_cast<std::size_t>(Nq_),
                    Nkv = static_cast<std::size_t>(Nkv_), Nqkv = Nq + 2 * Nkv;
  const std::size_t cache_elems = static_cast<std::size_t>(B_) * Hkv_ * cap_ * D_;
  auto alloc = [&](DeviceBuffer& b, std::size_t elems) { b = DeviceBuffer(elems * es); };
  // The weights are model.hpp's layer_weights of the shard (the one list of a
  // layer's weights), norms' scales filled around 1, projections scaled by 1/sqrt(fan-in).
  const struct {
    const char* name;
    DeviceBuffer* buf;
    Buf seed;
  } slots[] = {{"attn_norm", &w_attn_norm_, Buf::attn_norm}, {"qkv_proj", &w_qkv_, Buf::qkv},
               {"o_proj", &w_o_, Buf::o},                    {"mlp_norm", &w_mlp_norm_, Buf::mlp_norm},
               {"gate_up_proj", &w_gate_up_, Buf::gate_up},  {"down_proj", &w_down_, Buf::down}};
  for (const LayerWeight& w : layer_weights(layer_shard(r_))) {
    const auto* slot = std::find_if(std::begin(slots), std::end(slots), [&](const auto& x) { return w.name == x.name; });
    if (slot == std::end(slots)) throw std::logic_error("layer: no buffer for the weight " + w.name);
    alloc(*slot->buf, w.elements());
    // The fan-in of the whole layer's projection, so sums over the shards stay of order one.
    const std::uint64_t fan_in = w.name == "o_proj" || w.name == "down_proj" ? w.cols * layer_gpus(r_) : w.cols;
    const float scale = w.rows == 1 ? 1.0f : static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
    fill_random(slot->buf->get(), t, w.elements(), seed_of(seed, slot->seed, rank), scale, s);
  }
  alloc(x_, M * h);
  alloc(xn_, M * h);
  alloc(qkv_, M * Nqkv);
  alloc(q_, M * Nq);
  alloc(k_new_, M * Nkv);
  alloc(v_new_, M * Nkv);
  alloc(attn_, M * Nq);
  alloc(o_, M * h);
  alloc(xn2_, M * h);
  alloc(gate_up_, M * 2 * I);
  alloc(act_, M * I);
  alloc(out_, M * h);
  alloc(k_cache_, cache_elems);
  alloc(v_cache_, cache_elems);
  positions_ = DeviceBuffer(M * sizeof(std::int32_t));
  if (ws_floats) ws_ = DeviceBuffer(ws_floats * sizeof(float));

  fill_random(x_.get(), t, M * h, seed_of(seed, Buf::x, rank), 1.0f, s);
  // The cache holds earlier tokens' K and V (random); the step writes its own.
  fill_random(k_cache_.get(), t, cache_elems, seed_of(seed, Buf::k, rank), 1.0f, s);
  fill_random(v_cache_.get(), t, cache_elems, seed_of(seed, Buf::v, rank), 1.0f, s);
  for (DeviceBuffer* b : {&xn_, &qkv_, &q_, &k_new_, &v_new_, &attn_, &o_, &xn2_, &gate_up_, &act_, &out_})
    PB_CUDA_CHECK(cudaMemsetAsync(b->get(), 0, b->bytes(), s));
  std::vector<std::int32_t> pos(M);
  for (std::size_t i = 0; i < M; ++i) pos[i] = static_cast<std::int32_t>(prefill_ ? i % S_ : pos_);
  upload(positions_.get(), pos.data(), M * sizeof(std::int32_t), s);
}

// The four projections through cuBLASLt, bound to their buffers.
void LayerShard::make_matmuls() {
  const DType t = r_.dtype;
  const std::size_t M = static_cast<std::size_t>(M_), h = static_cast<std::size_t>(h_), I = static_cast<std::size_t>(I_),
                    Nq = static_cast<std::size_t>(Nq_), Nqkv = Nq + 2 * static_cast<std::size_t>(Nkv_);
  qkv_proj_ = std::make_unique<CublasLtLinear>(ctx_, t, LinearShape{M, Nqkv, h}, xn_.get(), w_qkv_.get(), qkv_.get());
  o_proj_ = std::make_unique<CublasLtLinear>(ctx_, t, LinearShape{M, h, Nq}, attn_.get(), w_o_.get(), o_.get());
  gate_up_proj_ =
      std::make_unique<CublasLtLinear>(ctx_, t, LinearShape{M, 2 * I, h}, xn2_.get(), w_gate_up_.get(), gate_up_.get());
  down_proj_ = std::make_unique<CublasLtLinear>(ctx_, t, LinearShape{M, h, I}, act_.get(), w_down_.get(), out_.get());
}

// The parameters of the KV-append and attention kernels.
void LayerShard::set_kernel_params(std::size_t ws_floats) {
  const DType t = r_.dtype;
  ap_ = kv_append_params(t, k_new_.get(), v_new_.get(), k_cache_.get(), v_cache_.get(), B_, S_, Hkv_, D_, cap_, pos_);
  if (prefill_)  // prefill attention reads the step's own (roped) k and v: no cached prefix
    pp_ = prefill_attention_params(t, q_.get(), k_new_.get(), v_new_.get(), attn_.get(), B_, S_, Hq_, Hkv_, D_);
  else
    dp_ = decode_attention_params(t, q_.get(), attn_.get(), k_cache_.get(), v_cache_.get(), B_, Hq_, Hkv_, L_, D_,
                                  splits_, ws_floats ? ws_.as<float>() : nullptr);
}

// ---- the reference over the shards --------------------------------------------------------

// Tolerance: twice the dtype's (atol scaled by the sum of |x*w| where the value
// is a projection), since six ops' roundings compound along the chain. Sharded,
// o_proj's and down_proj's partial sums are rounded to the type on each GPU and
// added by the all-reduce (rounding again), as the reference adds them.
void verify_layer_token(const std::vector<LayerShard*>& shards, const std::vector<reference::LayerWeights>& w,
                        const reference::Tolerance& tol, int b, int s, bool across_processes) {
  LayerShard& first = *shards.front();
  const DType t = w.front().t;
  const bool sharded = across_processes || shards.size() > 1;
  const std::size_t m = static_cast<std::size_t>(b) * first.step_tokens() + s;
  std::string wrong;
  // attn_norm (the same input and scales on every rank) -> each shard's attention part -> the sum of o.
  const std::vector<float> xn = reference::layer_rmsnorm(w[0], first.input_row(m), w[0].attn_norm, kNormEps);
  std::vector<double> o_sum;
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const auto part = shards[k]->reference_attention_part(w[k], xn, b, s, tol, wrong);
    if (o_sum.empty()) o_sum.assign(part.size(), 0.0);
    for (std::size_t i = 0; i < part.size(); ++i) o_sum[i] += part[i];
  }
  if (across_processes) processes().sum(o_sum);  // the other processes' shards' parts
  std::vector<float> o(o_sum.size());
  for (std::size_t i = 0; i < o.size(); ++i)
    o[i] = sharded ? reference::round_to(static_cast<float>(o_sum[i]), t) : static_cast<float>(o_sum[i]);
  // mlp_norm -> each shard's MLP part -> the sum of out.
  const std::vector<float> xn2 = reference::layer_rmsnorm(w[0], o, w[0].mlp_norm, kNormEps);
  std::vector<double> out(o.size(), 0.0), out_abs(o.size(), 0.0);
  for (std::size_t k = 0; k < shards.size(); ++k) {
    std::vector<double> abs;
    const auto part = shards[k]->reference_mlp_part(w[k], xn2, abs, sharded);
    for (std::size_t i = 0; i < part.size(); ++i) {
      out[i] += part[i];
      out_abs[i] += abs[i];
    }
  }
  if (across_processes) {
    processes().sum(out);
    processes().sum(out_abs);
  }
  for (std::size_t k = 0; k < shards.size() && wrong.empty(); ++k) {
    std::ostringstream where;
    where << shards[k]->describe() << ", sequence " << b << ", token " << s;
    try {
      reference::check_close(shards[k]->output_row(m), out, tol,
                             where.str() + ": layer output (elements are hidden indices)", &out_abs);
    } catch (const VerificationError& e) {
      wrong = e.what();
    }
  }
  // Over processes, every rank fails with the first rank's mismatch (or none does).
  if (across_processes) wrong = processes().first_of(wrong);
  if (!wrong.empty()) throw VerificationError(wrong);
}

std::vector<std::pair<int, int>> layer_tokens_to_verify(const LayerShard& sh) {
  const int B = sh.batch(), S = sh.step_tokens();
  std::vector<std::pair<int, int>> tokens;  // (sequence, token within the step)
  if (sh.prefill())
    tokens = {{0, S - 1}, {B - 1, (S - 1) / 2}, {0, 0}};
  else
    tokens = {{0, 0}, {B - 1, 0}};
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  return tokens;
}

reference::Tolerance layer_tolerance(DType t) {
  const auto base = reference::tolerance_for(t);
  return {2 * base.atol, 2 * base.rtol};
}

namespace {

// ---- the one-GPU op -----------------------------------------------------------------

class WholeLayerOp final : public PreparedOp, public LayerOpAccess {
 public:
  WholeLayerOp(Context& ctx, const OpRequest& r, const LayerPlan& plan) : ctx_(ctx), shard_(ctx, r, plan, 0) {}

  void run() override {
    shard_.enqueue_attention();
    shard_.enqueue_mlp();
  }

  std::vector<std::string> op_names() const override {
    return {"attn_norm", "qkv_proj", "rope", "qkv_split", "kv_append", "attention",
            "o_proj",    "mlp_norm", "gate_up_proj", "act_mul", "down_proj"};
  }

  // Runs the layer once, then follows a few tokens through the CPU reference of
  // the whole layer (verify_layer_token) and compares.
  void verify() override {
    run();
    PB_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    corrupt_for_test(fault_, shard_.out(), shard_.hidden_elements() * 2, ctx_.stream);
    const std::vector<reference::LayerWeights> w{shard_.weights()};
    const auto tol = layer_tolerance(w.front().t);
    for (const auto& [b, s] : layer_tokens_to_verify(shard_)) verify_layer_token({&shard_}, w, tol, b, s, false);
  }

  std::vector<float> output_values() override { return output_as_float(); }
  std::vector<float> output_as_float() override { return shard_.output_all(); }
  void set_fault_injection(bool on) override { fault_ = on; }

 private:
  Context& ctx_;
  LayerShard shard_;
  bool fault_ = false;
};

std::unique_ptr<PreparedOp> prepare_layer(Context& ctx, const OpRequest& r, const OpPlan& plan) {
  const auto& p = dynamic_cast<const LayerPlan&>(plan);
  if (p.gpus > 1) {
    const auto make = tensor_parallel_layer_maker();
    if (!make) throw Unsupported("layer: a tensor-parallel layer needs NCCL, and this build has none");
    return make(ctx, r, p);
  }
  return std::make_unique<WholeLayerOp>(ctx, r, p);
}

}  // namespace

}  // namespace phasebench::cuda

PHASEBENCH_CUDA_OPS(layer) {
  using namespace phasebench;
  using namespace phasebench::cuda;
  registry.add({kLayer, Impl::own, takes_16bit, {},
                [](const OpRequest& r, const Context& ctx) -> std::shared_ptr<const OpPlan> { return plan_layer(r, ctx); },
                prepare_layer});
}
