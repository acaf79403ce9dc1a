// The analytical model (analytical.hpp): a model's prefill and decode steps op by op
// on a GPU's roofline, from the same costs the benchmarks report.
#include "phasebench/analytical.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/json_fields.hpp"

namespace phasebench {

DType compute_dtype_for(const LayerOp& op, DType dtype) {
  if (op.kind == "linear" || op.kind == "grouped_linear" || op.kind == "batched_linear") return op.compute;
  // Attention and elementwise work run on the activations: 16-bit when weights are 8-bit.
  return element_bytes(dtype) == 1 ? DType::bf16 : dtype;
}

namespace {

PhaseEstimate estimate_phase(const ModelConfig& m, const Ceilings& ceil, const StepShape& step, const EstimateInputs& in,
                             const Precision& p, const std::string& gpu_name, const LinkModel& link) {
  PhaseEstimate pe;
  pe.phase = step.phase;
  pe.step = step;
  for (const auto& op : step_ops(m, step, p)) {
    auto oe = estimate_op(op, ceil, in.ceiling, in.dtype, link, gpu_name);
    if (op.link_bytes > 0 && in.measured_collective)
      if (const auto t = in.measured_collective(op)) {
        oe.time_s = *t;
        oe.latency_s = 0;  // inside the measured time, not apart from it
        oe.measured = true;
      }
    pe.total += op.cost.scaled(op.count);
    pe.time_s += oe.time_s * static_cast<double>(op.count);
    pe.ops.push_back(std::move(oe));
  }
  return pe;
}

}  // namespace

LinkModel LinkModel::of(const GpuSpec& g) {
  return {g.interconnect_gbps, g.collective_base_us * 1e-6, g.collective_step_us * 1e-6, g.collective_latency_source};
}

std::uint64_t LinkModel::steps(const LayerOp& op) {
  const auto n = op.shape.get("gpus", 1);
  if (n <= 1) return 0;
  if (op.kind == "all_reduce") return 2 * (n - 1);
  if (op.kind == "all_gather" || op.kind == "reduce_scatter") return n - 1;
  return n;
}

OpEstimate estimate_op(const LayerOp& op, const Ceilings& ceil, CeilingSource source, DType dtype, const LinkModel& link,
                       const std::string& gpu_name) {
  const auto bw = ceil.bandwidth_for(source);
  if (!bw) throw InputError("GPU '" + gpu_name + "' has no memory bandwidth in the spec table");
  OpEstimate oe;
  oe.op = op;
  oe.compute_dtype = compute_dtype_for(op, dtype);
  oe.bandwidth = bw->value;
  if (op.link_bytes > 0) {
    // A ring collective: each GPU sends link_bytes while it receives as many,
    // so one direction of the link (half the datasheet's bidirectional figure) sets
    // the bandwidth term; the link's latency comes first (decode's small all-reduces
    // are mostly latency).
    if (!(link.gbps > 0))
      throw InputError("GPU '" + gpu_name + "' has no interconnect bandwidth in the spec table; --tp needs it");
    oe.bandwidth = link.gbps * 1e9 / 2;
    oe.latency_s = link.latency_s(op);
    oe.time_s = oe.latency_s + static_cast<double>(op.link_bytes) / oe.bandwidth;
    oe.bound = Bound::link;
    return oe;
  }
  if (op.cost.flops > 0) {
    // FP4 weights compute in FP4 where the GPU has an FP4 ceiling (Blackwell);
    // elsewhere they are widened to the activations' type (weight-only, as the
    // Hopper kernels of gpt-oss's MXFP4 run), so the activations' ceiling holds.
    if (sub_byte(oe.compute_dtype) && !ceil.compute_for(oe.compute_dtype, source))
      oe.compute_dtype = element_bytes(dtype) == 2 ? dtype : DType::bf16;
    const auto peak = ceil.compute_for(oe.compute_dtype, source);
    if (!peak)
      throw InputError("GPU '" + gpu_name + "' has no " + std::string(to_string(oe.compute_dtype)) +
                       " peak in the spec table (the part does not support it); choose another --dtype");
    oe.peak_flops = peak->value;
  }
  oe.time_s = roofline_time(static_cast<double>(op.cost.flops), static_cast<double>(op.cost.bytes.total()), oe.peak_flops,
                            oe.bandwidth);
  oe.bound = op.cost.flops > 0 ? classify(op.cost.intensity(), oe.peak_flops / oe.bandwidth) : Bound::memory;
  return oe;
}

Precision step_precision(const ModelConfig& m, const EstimateInputs& in) {
  Precision p = Precision::from(in.dtype, in.kv_dtype);
  const auto f = in.weights ? in.weights : m.quantization;
  if (f && f->quantized()) {
    p.linear = *f;
    // Weight-only formats widen the weights to the activations' type for the math;
    // fp8 computes in fp8 and nvfp4/mxfp4 in FP4 (where the GPU has no FP4 ceiling,
    // estimate_phase widens them).
    if (p.linear.compute != DType::fp8 && !sub_byte(p.linear.compute) && element_bytes(in.dtype) == 2)
      p.linear.compute = in.dtype;
    p.a = 2;
    p.w = 2;  // embeddings, norms and the layers left plain
    p.plain_modules = m.quantization && !in.weights ? m.not_quantized : std::vector<std::string>{"lm_head", "router"};
    if (in.weights) check_weight_format(m, p.linear, p.plain_modules, "--weight-dtype " + p.linear.name + " for " + m.name);
  } else if (f) {
    p = Precision::from(f->compute, in.kv_dtype);  // a plain --weight-dtype: the whole model in it
  }
  return p;
}

namespace {

// Prompt and contexts against max_position_embeddings.
void check_positions(const ModelConfig& m, const EstimateInputs& in, std::vector<std::string>& warnings) {
  if (!m.max_position) return;
  const auto longest = std::max({in.prompt, in.context, in.generate ? in.prompt + in.generate - 1 : 0});
  if (longest <= m.max_position) return;
  const std::string what = "a context of " + std::to_string(longest) + " tokens is beyond the model's " +
                           "max_position_embeddings (" + std::to_string(m.max_position) + ")";
  if (!in.allow_long_context) throw InputError(what + "; shorten it, or pass --allow-long-context to estimate anyway");
  warnings.push_back(what + ": estimated anyway (--allow-long-context); the model was not trained for it");
}

RequestEstimate estimate_request(const ModelConfig& m, const Ceilings& ceil, const EstimateInputs& in, const Precision& p,
                                 const std::string& gpu_name, const LinkModel& link, double ttft_s) {
  RequestEstimate r;
  r.prompt = in.prompt;
  r.generate = in.generate;
  r.ttft_s = ttft_s;
  for (std::uint64_t t = 1; t < in.generate; ++t)
    r.decode_s += estimate_phase(m, ceil, {Phase::decode, in.batch, 1, in.prompt + t}, in, p, gpu_name, link).time_s;
  r.total_s = r.ttft_s + r.decode_s;
  r.mean_per_token_s = in.generate > 1 ? r.decode_s / static_cast<double>(in.generate - 1) : 0.0;
  r.tokens_per_s = r.total_s > 0 ? static_cast<double>(in.batch * in.generate) / r.total_s : 0.0;
  r.prefill_share = r.total_s > 0 ? r.ttft_s / r.total_s : 0.0;
  return r;
}

}  // namespace

Estimate estimate(const ModelConfig& m, const GpuSpec& gpu, const EstimateInputs& in) {
  if (in.batch == 0) throw InputError("--batch must be a positive integer");
  if (in.prompt == 0) throw InputError("--prompt must be a positive integer");
  if (in.context == 0) throw InputError("--context must be a positive integer");
  if (in.generate > (1ull << 20)) throw InputError("--generate " + std::to_string(in.generate) + ": at most 1048576 tokens");
  Estimate e;
  e.model = m;
  e.gpu = gpu;
  e.in = in;
  check_positions(m, in, e.warnings);
  e.precision = step_precision(m, in);
  e.params = parameter_count(m);
  e.active_params = active_parameter_count(m);
  if (in.tp > 2 && gpu.interconnect.find("(2 GPUs)") != std::string::npos)
    e.warnings.push_back("--tp " + std::to_string(in.tp) + " on " + gpu.name + ": its " + gpu.interconnect +
                         " joins pairs only; collectives beyond a pair cross PCIe and take longer than shown");
  // Everything below is per GPU: the shard one GPU holds and runs.
  const ModelConfig s = tensor_parallel_shard(m, in.tp);
  if (in.tp > 1 && e.precision.linear.quantized())
    check_weight_format(s, e.precision.linear, e.precision.plain_modules, "--tp " + std::to_string(in.tp) + " of " + m.name);
  e.weight_bytes = weight_bytes(s, e.precision);
  e.kv_bytes_per_token = kv_bytes_per_token(s, e.precision.c);
  e.kv_cache_bytes = kv_cache_bytes(s, in.context, in.batch, e.precision.c);
  const auto per_seq = kv_cache_bytes(s, in.context, 1, e.precision.c);
  e.max_batch = gpu.memory_bytes > e.weight_bytes ? (gpu.memory_bytes - e.weight_bytes) / per_seq : 0;
  const auto ceil = gpu.ceilings();
  const LinkModel link = LinkModel::of(gpu);
  e.prefill = estimate_phase(s, ceil, {Phase::prefill, in.batch, in.prompt, 0}, in, e.precision, gpu.key, link);
  e.decode = estimate_phase(s, ceil, {Phase::decode, in.batch, in.new_tokens, in.context}, in, e.precision, gpu.key, link);
  e.ttft_s = e.prefill.time_s;
  e.per_token_s = e.decode.time_s;
  if (in.generate) e.request = estimate_request(s, ceil, in, e.precision, gpu.key, link, e.ttft_s);
  if (in.power_w) {
    if (!(*in.power_w > 0 && std::isfinite(*in.power_w)))
      throw InputError("--power must be a positive number of watts per GPU (e.g. 700)");
    EnergyEstimate en;
    en.power_w = *in.power_w;
    const double watts = *in.power_w * static_cast<double>(in.tp);  // every GPU draws it
    en.prefill_j_per_token = watts * e.ttft_s / static_cast<double>(in.batch * in.prompt);
    en.decode_j_per_token = watts * e.per_token_s / static_cast<double>(in.batch);
    const auto decode_bytes = static_cast<double>(e.decode.total.bytes.total()) * static_cast<double>(in.tp);
    en.decode_j_per_byte = decode_bytes > 0 ? watts * e.per_token_s / decode_bytes : 0;
    if (e.request) en.request_j_per_token = watts * e.request->total_s / static_cast<double>(in.batch * e.request->generate);
    e.energy = en;
  }
  return e;
}

SimpleEstimate simple_estimate(std::uint64_t hidden, std::uint64_t layers, std::uint64_t batch, std::uint64_t prompt,
                               DType dtype) {
  if (hidden == 0 || layers == 0 || batch == 0 || prompt == 0)
    throw InputError("the simple model needs positive --hidden, --layers, --batch and --prompt");
  SimpleEstimate s;
  s.hidden = hidden;
  s.layers = layers;
  s.batch = batch;
  s.prompt = prompt;
  s.dtype = dtype;
  s.params_per_layer = mul({12, hidden, hidden}, "parameters");
  const auto params = mul(s.params_per_layer, layers, "parameters");
  s.weight_bytes = mul(params, element_bytes(dtype), "weight bytes");
  s.prefill_flops = mul({2, params, batch, prompt}, "FLOPs");
  s.decode_flops = mul({2, params, batch}, "FLOPs");
  s.prefill_intensity = static_cast<double>(s.prefill_flops) / static_cast<double>(s.weight_bytes);
  s.decode_intensity = static_cast<double>(s.decode_flops) / static_cast<double>(s.weight_bytes);
  return s;
}

namespace {

// Null without --tp; else the split and the link the collectives are timed on.
nlohmann::json tensor_parallel_json(const Estimate& e) {
  if (e.in.tp <= 1) return nullptr;
  const auto s = tensor_parallel_shard(e.model, e.in.tp);
  return {{"gpus", e.in.tp},
          {"heads_per_gpu", s.heads},
          {"kv_heads_per_gpu", s.kv_heads},
          {"kv_heads_replicated", !e.model.uses_mla() && e.model.kv_heads < e.in.tp},
          {"interconnect", e.gpu.interconnect},
          {"interconnect_gbps_bidirectional", e.gpu.interconnect_gbps},
          {"collectives_measured_from", e.in.measured_collectives_from.empty()
                                           ? nlohmann::json()
                                           : nlohmann::json(e.in.measured_collectives_from)},
          {"collective_latency", e.gpu.collective_latency_source.empty()
                                     ? nlohmann::json()
                                     : nlohmann::json{{"base_s", e.gpu.collective_base_us * 1e-6},
                                                      {"per_step_s", e.gpu.collective_step_us * 1e-6},
                                                      {"source", e.gpu.collective_latency_source}}}};
}

nlohmann::json phase_json(const PhaseEstimate& p) {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& o : p.ops) {
    auto j = cost_json(o.op.cost);
    j["name"] = o.op.name;
    j["kind"] = o.op.kind;
    if (!o.op.variant.empty()) j["variant"] = o.op.variant;
    if (!o.op.weights.empty()) j["weights"] = o.op.weights;
    j["count"] = o.op.count;
    j["shape"] = o.op.shape.to_json();
    j["compute_dtype"] = to_string(o.compute_dtype);
    j["peak_flops_per_s"] = o.peak_flops;
    j["bandwidth_bytes_per_s"] = o.bandwidth;
    j["bound"] = to_string(o.bound);
    j["time_s"] = o.time_s;
    if (o.op.link_bytes) {
      j["link_bytes"] = o.op.link_bytes;
      j["latency_s"] = o.measured ? nlohmann::json() : nlohmann::json(o.latency_s);
      j["measured"] = o.measured;
    }
    ops.push_back(std::move(j));
  }
  auto j = cost_json(p.total);
  j["batch"] = p.step.batch;
  j["new_tokens"] = p.step.new_tokens;
  j["context"] = p.step.context;
  j["time_s"] = p.time_s;
  j["ops"] = std::move(ops);
  return j;
}

std::string human_bytes(double b) {
  if (b >= 1e9) return fmt::format("{:.3f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.3f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.3f} kB", b / 1e3);
  return fmt::format("{:.0f} B", b);
}

std::string human_time(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.2f} us", s * 1e6);
}

void phase_text(std::string& out, const PhaseEstimate& p) {
  out += fmt::format("\n{} step: batch {}, {} new token(s) per sequence, context {}\n", to_string(p.phase), p.step.batch,
                     p.step.new_tokens, p.step.context);
  // Ops that differ between kinds of layers carry their variant: "attention [sliding window 4096]".
  std::size_t width = 15;
  for (const auto& o : p.ops) width = std::max(width, o.op.name.size() + (o.op.variant.empty() ? 0 : o.op.variant.size() + 3));
  out += fmt::format("  {:<{}} {:>5} {:>12} {:>11} {:>11} {:>11} {:>11} {:>10} {:>8} {:>11}\n", "op", width, "count",
                     "GFLOP", "weights MB", "KV MB", "act MB", "writes MB", "FLOP/B", "bound", "time");
  for (const auto& o : p.ops) {
    const auto& c = o.op.cost;
    out += fmt::format("  {:<{}} {:>5} {:>12.3f} {:>11.3f} {:>11.3f} {:>11.3f} {:>11.3f} {:>10.2f} {:>8} {:>11}\n",
                       o.op.variant.empty() ? o.op.name : o.op.name + " [" + o.op.variant + "]", width, o.op.count, c.flops / 1e9, c.bytes.weights / 1e6, c.bytes.kv_cache / 1e6,
                       (c.bytes.activations + c.bytes.block_table) / 1e6, c.bytes.writes / 1e6, c.intensity(),
                       to_string(o.bound), human_time(o.time_s * static_cast<double>(o.op.count)));
  }
  const auto& t = p.total;
  out += fmt::format("  {:<{}} {:>5} {:>12.3f} {:>11.3f} {:>11.3f} {:>11.3f} {:>11.3f} {:>10.2f} {:>8} {:>11}\n", "total",
                     width, "",
                     t.flops / 1e9, t.bytes.weights / 1e6, t.bytes.kv_cache / 1e6,
                     (t.bytes.activations + t.bytes.block_table) / 1e6, t.bytes.writes / 1e6, t.intensity(), "",
                     human_time(p.time_s));
  double link_bytes = 0, link_s = 0, latency_s = 0;
  int collectives = 0, measured = 0;
  for (const auto& o : p.ops)
    if (o.op.link_bytes) {
      link_bytes += static_cast<double>(o.op.link_bytes * o.op.count);
      link_s += o.time_s * static_cast<double>(o.op.count);
      latency_s += o.latency_s * static_cast<double>(o.op.count);
      ++collectives;
      measured += o.measured ? 1 : 0;
    }
  if (link_bytes > 0)
    out += fmt::format("  collectives: {} sent per GPU over the interconnect, {} ({:.1f}% of the step; {}){}\n",
                       human_bytes(link_bytes), human_time(link_s), p.time_s > 0 ? 100 * link_s / p.time_s : 0.0,
                       measured == collectives ? std::string("measured") : human_time(latency_s) + " of it latency",
                       measured == 0 ? std::string()
                                     : fmt::format("; {} of {} collective ops measured", measured, collectives));
}

// Each kind of layer (window, MoE) and how many layers have it.
nlohmann::json layer_kinds_json(const ModelConfig& m) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& [kind, count] : layer_groups(m))
    a.push_back({{"layers", count}, {"sliding_window", kind.window}, {"attention_chunk", kind.chunk}, {"moe", kind.moe}});
  return a;
}

nlohmann::json request_json(const RequestEstimate& r) {
  return {{"prompt", r.prompt},       {"generate", r.generate},         {"ttft_s", r.ttft_s},
          {"decode_s", r.decode_s},   {"total_s", r.total_s},           {"mean_per_token_s", r.mean_per_token_s},
          {"tokens_per_s", r.tokens_per_s}, {"prefill_share", r.prefill_share}};
}

}  // namespace

nlohmann::json to_json(const SimpleEstimate& s) {
  return {{"hidden", s.hidden},
          {"layers", s.layers},
          {"batch", s.batch},
          {"prompt", s.prompt},
          {"dtype", to_string(s.dtype)},
          {"params_per_layer", s.params_per_layer},
          {"weight_bytes", s.weight_bytes},
          {"prefill_flops", s.prefill_flops},
          {"prefill_intensity", s.prefill_intensity},
          {"decode_flops", s.decode_flops},
          {"decode_intensity", s.decode_intensity}};
}

nlohmann::json to_json(const Estimate& e) {
  const auto& m = e.model;
  const auto simple = simple_estimate(m.hidden, m.layers, e.in.batch, e.in.prompt, e.in.dtype);
  return {
      {"schema_version", 1},
      {"model",
       {{"name", m.name},
        {"source", m.source},
        {"model_type", m.model_type},
        {"hidden_size", m.hidden},
        {"intermediate_size", m.intermediate},
        {"num_hidden_layers", m.layers},
        {"num_attention_heads", m.heads},
        {"num_key_value_heads", m.kv_heads},
        {"head_dim", m.head_dim},
        {"vocab_size", m.vocab},
        {"tie_word_embeddings", m.tie_word_embeddings},
        {"max_position_embeddings", m.max_position},
        {"layer_kinds", layer_kinds_json(m)},
        {"experts", m.experts},
        {"experts_per_token", m.experts_per_token},
        {"expert_intermediate_size", m.expert_intermediate},
        {"shared_expert_intermediate_size", m.shared_intermediate},
        {"mla", m.uses_mla() ? nlohmann::json{{"q_lora_rank", m.mla.q_lora_rank},
                                               {"kv_lora_rank", m.mla.kv_lora_rank},
                                               {"qk_nope_head_dim", m.mla.qk_nope},
                                               {"qk_rope_head_dim", m.mla.qk_rope},
                                               {"v_head_dim", m.mla.v_head}}
                             : nlohmann::json()},
        {"mtp_layers_not_counted", m.mtp_layers},
        {"quantization", m.quantization ? nlohmann::json(m.quantization->name) : nlohmann::json()},
        {"params", e.params},
        {"active_params", e.active_params},
        {"active_params_without_input_embedding", e.active_params - m.vocab * m.hidden}}},
      {"gpu",
       {{"key", e.gpu.key},
        {"name", e.gpu.name},
        {"memory_bytes", e.gpu.memory_bytes},
        {"ceilings", ceilings_json(e.gpu.ceilings())}}},
      {"inputs",
       {{"batch", e.in.batch},
        {"prompt", e.in.prompt},
        {"context", e.in.context},
        {"dtype", to_string(e.in.dtype)},
        {"kv_dtype", to_string(e.in.kv_dtype)},
        {"linear_weights", e.precision.linear.name},
        {"generate", e.in.generate},
        {"routing", m.routing.text()},
        {"tp", e.in.tp},
        {"ceiling_source", to_string(e.in.ceiling)}}},
      {"tensor_parallel", tensor_parallel_json(e)},
      {"element_bytes", {{"weights", e.precision.w}, {"activations", e.precision.a}, {"kv_cache", e.precision.c}}},
      {"weight_bytes", e.weight_bytes},
      {"kv_bytes_per_token", e.kv_bytes_per_token},
      {"kv_cache_bytes", e.kv_cache_bytes},
      {"max_batch", e.max_batch},
      {"phases", {{"prefill", phase_json(e.prefill)}, {"decode", phase_json(e.decode)}}},
      {"ttft_s", e.ttft_s},
      {"per_token_s", e.per_token_s},
      {"decode_tokens_per_s", e.per_token_s > 0 ? static_cast<double>(e.in.batch) / e.per_token_s : 0.0},
      {"request", e.request ? request_json(*e.request) : nlohmann::json()},
      {"energy", e.energy ? nlohmann::json{{"power_w_per_gpu", e.energy->power_w},
                                           {"gpus", e.in.tp},
                                           {"prefill_j_per_token", e.energy->prefill_j_per_token},
                                           {"decode_j_per_token", e.energy->decode_j_per_token},
                                           {"decode_j_per_byte", e.energy->decode_j_per_byte},
                                           {"request_j_per_token", e.energy->request_j_per_token
                                                                       ? nlohmann::json(*e.energy->request_j_per_token)
                                                                       : nlohmann::json()},
                                           {"method", "power x GPUs x predicted time (the draw held constant)"}}
                          : nlohmann::json()},
      {"warnings", e.warnings},
      {"left_out", e.model.notes},
      {"simple_model", to_json(simple)},
      {"notes",
       "FLOPs exclude softmax, RoPE, norms and other elementwise work (their bytes count). Times are roofline "
       "predictions max(FLOPs/P, bytes/W) per op, summed. lm_head runs on the last token of each sequence. max_batch "
       "counts weights and KV cache only."}};
}

std::string to_text(const SimpleEstimate& s, const GpuSpec* gpu) {
  std::string out = fmt::format(
      "simple model: each layer is 12*h^2 parameters and its only traffic is its weights\n"
      "  h {}, {} layers, batch {}, prompt {}, {} ({} bytes/element)\n",
      s.hidden, s.layers, s.batch, s.prompt, to_string(s.dtype), element_bytes(s.dtype));
  out += fmt::format("  parameters per layer   {:.2f} M\n", s.params_per_layer / 1e6);
  out += fmt::format("  weights                {:.3f} GB\n", s.weight_bytes / 1e9);
  out += fmt::format("  prefill FLOPs          {:.2f} GFLOPs\n", s.prefill_flops / 1e9);
  out += fmt::format("  prefill intensity      {:.2f} FLOP/byte\n", s.prefill_intensity);
  out += fmt::format("  decode FLOPs           {:.2f} GFLOPs\n", s.decode_flops / 1e9);
  out += fmt::format("  decode intensity       {:.2f} FLOP/byte\n", s.decode_intensity);
  if (gpu) {
    const auto c = gpu->ceilings();
    const auto P = c.compute_for(s.dtype, CeilingSource::datasheet);
    const auto W = c.bandwidth_for(CeilingSource::datasheet);
    if (P && W) {
      out += fmt::format("  on {} (datasheet {:.0f} TFLOP/s {}, {:.0f} GB/s, ridge {:.1f} FLOP/byte):\n", gpu->name,
                         P->value / 1e12, to_string(s.dtype), W->value / 1e9, P->value / W->value);
      out += fmt::format("    prefill {} ({}-bound), decode step {} ({}-bound)\n",
                         human_time(roofline_time(static_cast<double>(s.prefill_flops), static_cast<double>(s.weight_bytes), P->value, W->value)),
                         to_string(classify(s.prefill_intensity, P->value / W->value)),
                         human_time(roofline_time(static_cast<double>(s.decode_flops), static_cast<double>(s.weight_bytes), P->value, W->value)),
                         to_string(classify(s.decode_intensity, P->value / W->value)));
    }
  }
  return out;
}

std::string to_text(const Estimate& e) {
  const auto& m = e.model;
  std::string out;
  out += fmt::format("model {} ({}): h {}, I {}, {} layers, {} q heads / {} kv heads, head_dim {}, vocab {}\n", m.name,
                     m.model_type, m.hidden, m.intermediate, m.layers, m.heads, m.kv_heads, m.head_dim, m.vocab);
  for (const auto& w : e.warnings) out += "WARNING: " + w + "\n";
  if (m.experts)
    out += fmt::format("  mixture of experts: {} experts of width {}, {} per token{}; routing {}\n", m.experts,
                       m.expert_intermediate, m.experts_per_token,
                       m.shared_intermediate ? fmt::format(", a shared expert of width {}", m.shared_intermediate) : "",
                       m.routing.text());
  for (const auto& [kind, count] : layer_groups(m))
    if (layer_groups(m).size() > 1 || kind.window || kind.chunk)
      out += fmt::format("  {} layer(s): {} attention, {} MLP\n", count,
                         kind.window  ? fmt::format("sliding-window ({} tokens)", kind.window)
                         : kind.chunk ? fmt::format("chunked ({} tokens)", kind.chunk)
                                      : std::string("full"),
                         kind.moe ? "mixture-of-experts" : "dense");
  if (m.experts)
    out += fmt::format("  {} parameters ({:.3f} B), {:.3f} B active per token ({:.3f} B without the input embedding)\n",
                       e.params, e.params / 1e9, e.active_params / 1e9, (e.active_params - m.vocab * m.hidden) / 1e9);
  else
    out += fmt::format("  {} parameters ({:.3f} B)\n", e.params, e.params / 1e9);
  out += fmt::format("  weights {}{}: linear layers {}, the rest {}-bit\n", human_bytes(static_cast<double>(e.weight_bytes)),
                     e.in.tp > 1 ? " per GPU" : "", e.precision.linear.name, 8 * e.precision.w);
  // Which ceiling the quantised layers' math meets: FP4 only where the GPU has one.
  if (sub_byte(e.precision.linear.compute)) {
    DType used = e.precision.linear.compute;
    for (const auto& o : e.prefill.ops)
      if (o.op.compute == e.precision.linear.compute) used = o.compute_dtype;
    out += used == e.precision.linear.compute
               ? fmt::format("  the {} layers compute in {} (this GPU's FP4 ceiling)\n", to_string(e.precision.linear.compute),
                             to_string(used))
               : fmt::format("  the {} layers compute in {}: this GPU has no FP4 ceiling, the weights are widened "
                             "(weight-only)\n", to_string(e.precision.linear.compute), to_string(used));
  }
  if (e.in.tp > 1) {
    const auto s = tensor_parallel_shard(m, e.in.tp);
    out += fmt::format(
        "  tensor parallel over {} GPUs (Megatron-style: heads, MLP and expert widths split; an all-reduce after attention "
        "and after the MLP of every layer): per GPU {} q heads / {} kv head(s){}; every figure below is one GPU's\n",
        e.in.tp, s.heads, s.kv_heads,
        m.uses_mla() ? " (the latent cache replicated)"
                     : (m.kv_heads < e.in.tp ? " (replicated: fewer KV heads than GPUs)" : ""));
    out += fmt::format("  collectives on {} at {:.0f} GB/s both ways ({:.0f} GB/s each way sets their bandwidth term)\n",
                       e.gpu.interconnect, e.gpu.interconnect_gbps, e.gpu.interconnect_gbps / 2);
    const LinkModel link = LinkModel::of(e.gpu);
    if (!e.in.measured_collectives_from.empty())
      out += fmt::format("  collectives measured: the ops the points of {} cover take their measured times (NCCL, "
                         "interpolated over the log of the bytes); the rest the link model's\n",
                         e.in.measured_collectives_from);
    if (link.latency_source.empty()) {
      out += "  collective latency: none known for this GPU (gpus.json has no collective_latency): the collectives are "
             "timed by their bytes alone, optimistic for decode's small all-reduces\n";
    } else {
      const LayerOp ar{"", "all_reduce", Shape{{"gpus", e.in.tp}}, {}};
      out += fmt::format("  collective latency: {:.1f} us + {:.1f} us per step, {:.1f} us before an all-reduce over {} GPUs "
                         "moves a byte ({} steps); from {}\n",
                         link.base_s * 1e6, link.step_s * 1e6, link.latency_s(ar) * 1e6, e.in.tp, LinkModel::steps(ar),
                         link.latency_source);
    }
  }
  const auto ceil = e.gpu.ceilings();
  const auto W = ceil.bandwidth_for(e.in.ceiling);
  out += fmt::format("gpu {}: {} memory, {:.0f} GB/s ({} ceilings)\n", e.gpu.name,
                     human_bytes(static_cast<double>(e.gpu.memory_bytes)), W ? W->value / 1e9 : 0.0, to_string(e.in.ceiling));
  for (const auto& [t, v] : ceil.compute())
    if (auto c = ceil.compute_for(t, e.in.ceiling))
      out += fmt::format("  {:<5} {:>8.1f} TFLOP/s, ridge {:.1f} FLOP/byte\n", to_string(t), c->value / 1e12,
                         W ? c->value / W->value : 0.0);
  phase_text(out, e.prefill);
  phase_text(out, e.decode);
  out += fmt::format("\nTTFT (prefill of batch {} x prompt {})      {}\n", e.in.batch, e.in.prompt, human_time(e.ttft_s));
  out += fmt::format("per-token latency (decode at context {})  {}  ({:.1f} tokens/s across the batch, decode step only)\n",
                     e.in.context, human_time(e.per_token_s), e.per_token_s > 0 ? e.in.batch / e.per_token_s : 0.0);
  if (e.request) {
    const auto& r = *e.request;
    // One generated token comes from the prefill's logits: there is no decode step to average.
    const std::string decode = r.generate > 1 ? fmt::format("then {} per token", human_time(r.mean_per_token_s))
                                              : std::string("the one token from the prefill, no decode step");
    out += fmt::format(
        "request of {} prompt + {} generated token{} (batch {}): {} in all; TTFT {}, {}; {:.1f} tokens/s across the "
        "batch over the whole request (prefill included); prefill is {:.1f}% of the time\n",
        r.prompt, r.generate, r.generate > 1 ? "s" : "", e.in.batch, human_time(r.total_s), human_time(r.ttft_s), decode,
        r.tokens_per_s, 100 * r.prefill_share);
  }
  if (e.energy) {
    const auto& en = *e.energy;
    out += fmt::format("energy at {:g} W per GPU{} (held constant): prefill {:.3g} J/token, decode {:.3g} J/token "
                       "({:.0f} pJ per byte moved){}\n",
                       en.power_w, e.in.tp > 1 ? fmt::format(" x {} GPUs", e.in.tp) : "", en.prefill_j_per_token,
                       en.decode_j_per_token, en.decode_j_per_byte * 1e12,
                       en.request_j_per_token ? fmt::format("; the request {:.3g} J per generated token", *en.request_j_per_token) : "");
  }
  out += fmt::format("KV cache: {} per token, {} for batch {} at context {}\n",
                     human_bytes(static_cast<double>(e.kv_bytes_per_token)), human_bytes(static_cast<double>(e.kv_cache_bytes)),
                     e.in.batch, e.in.context);
  if (e.max_batch == 0)
    out += fmt::format("largest batch that fits at context {}: none (weights alone exceed {} of memory)\n", e.in.context,
                       human_bytes(static_cast<double>(e.gpu.memory_bytes)));
  else
    out += fmt::format("largest batch that fits at context {}: {} (weights + KV cache in {}; activations and workspace not counted)\n",
                       e.in.context, e.max_batch, human_bytes(static_cast<double>(e.gpu.memory_bytes)));

  if (e.in.tp > 1) {
    out += "\n(the comparison with the simple 12*h^2 model is printed for one GPU: drop --tp)\n";
  } else {
    // What the simple 12*h^2 weights-only model leaves out, on the same h, layers and step.
    const auto s = simple_estimate(m.hidden, m.layers, e.in.batch, e.in.prompt, e.in.dtype);
    const auto simple_decode_flops = s.decode_flops;
    out += fmt::format("\nvs the simple 12*h^2 weights-only model (same h, layers, batch, prompt):\n");
    out += fmt::format("  {:<34} {:>16} {:>16}\n", "", "simple", "this model");
    auto row = [&](const std::string& what, double a, double b, const char* unit) {
      out += fmt::format("  {:<34} {:>13.3f} {:<2} {:>13.3f} {:<2}\n", what, a, unit, b, unit);
    };
    double layer_params = 0;  // mean over the layers (kinds differ: windows do not change it, experts do)
    for (const auto& [kind, count] : layer_groups(m))
      layer_params += static_cast<double>(layer_parameter_count(m, kind)) * static_cast<double>(count);
    row("parameters per layer (M, mean)", s.params_per_layer / 1e6, layer_params / static_cast<double>(m.layers) / 1e6, "");
    row("parameters in total (B)", s.params_per_layer * s.layers / 1e9, e.params / 1e9, "");
    row("prefill GFLOPs", s.prefill_flops / 1e9, e.prefill.total.flops / 1e9, "");
    row("prefill bytes (GB)", s.weight_bytes / 1e9, e.prefill.total.bytes.total() / 1e9, "");
    row("decode GFLOPs", simple_decode_flops / 1e9, e.decode.total.flops / 1e9, "");
    row("decode bytes (GB)", s.weight_bytes / 1e9, e.decode.total.bytes.total() / 1e9, "");
    row("decode intensity (FLOP/byte)", s.decode_intensity, e.decode.total.intensity(), "");
    out += "  left out by the simple model:\n";
    double attention_weights = 0;
    for (const auto& w : layer_weights(m))
      if (w.linear && w.name != "gate_up_proj" && w.name != "down_proj") attention_weights += static_cast<double>(w.elements());
    const std::string attention_kind =
        m.uses_mla() ? fmt::format("MLA: K and V through a latent of rank {}", m.mla.kv_lora_rank)
                     : fmt::format("{} of {} heads for k/v", m.kv_heads, m.heads);
    out += fmt::format("    attention projections of {:.1f} M per layer, {} (simple assumes 4h^2 = {:.1f} M)\n",
                       attention_weights / 1e6, attention_kind, 4.0 * m.hidden * m.hidden / 1e6);
    if (m.experts)
      out += fmt::format("    MoE MLP: {} experts of 3*h*{} = {:.1f} M each, {} per token{} (simple assumes 8h^2 = {:.1f} M)\n",
                         m.experts, m.expert_intermediate, 3.0 * m.hidden * m.expert_intermediate / 1e6, m.experts_per_token,
                         m.shared_intermediate ? fmt::format(", plus a shared expert of width {}", m.shared_intermediate) : "",
                         8.0 * m.hidden * m.hidden / 1e6);
    if (!m.all_layers_moe())
      out += fmt::format("    {}MLP of 3*h*I = {:.1f} M per layer (simple assumes 8h^2 = {:.1f} M)\n", m.experts ? "dense layers' " : "",
                         3.0 * m.hidden * m.intermediate / 1e6, 8.0 * m.hidden * m.hidden / 1e6);
    out += fmt::format("    embedding + vocabulary projection: {:.3f} B parameters\n",
                       (m.tie_word_embeddings ? 1.0 : 2.0) * m.vocab * m.hidden / 1e9);
    out += fmt::format("    activation traffic: prefill {}, decode {}\n",
                       human_bytes(static_cast<double>(e.prefill.total.bytes.activations + e.prefill.total.bytes.writes)),
                       human_bytes(static_cast<double>(e.decode.total.bytes.activations + e.decode.total.bytes.writes)));
    out += fmt::format("    KV-cache reads in decode: {}; attention FLOPs in prefill: {:.2f} GFLOPs\n",
                       human_bytes(static_cast<double>(e.decode.total.bytes.kv_cache)),
                       [&] {
                         double f = 0;
                         for (const auto& o : e.prefill.ops)
                           if (o.op.kind == "prefill_attention") f += static_cast<double>(o.op.cost.flops * o.op.count);
                         return f / 1e9;
                       }());
  }
  for (const auto& n : m.notes) out += "  left out for " + m.model_type + ": " + n + "\n";
  out += "notes: FLOPs exclude softmax, RoPE and norms (their bytes count); times are roofline predictions summed per op.\n";
  return out;
}

}  // namespace phasebench
