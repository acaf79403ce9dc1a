// The step-time model (step_time.hpp): an engine step's time composed op by op,
// from measured curves where they cover the op's shape, else from the roofline
// scaled by a stated efficiency.
#include "phasebench/step_time.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "phasebench/error.hpp"

namespace phasebench {

std::uint64_t StepMix::tokens() const {
  std::uint64_t t = decode_contexts.size();
  for (const auto& c : prefill) t += c.tokens;
  return t;
}

// ---- measured curves ----------------------------------------------------------------------

std::optional<std::uint64_t> point_size(const nlohmann::json& point, const char* dim) {
  const auto sh = point.find("shape");
  if (sh == point.end() || !sh->is_object()) return std::nullopt;
  const auto v = sh->find(dim);
  if (v == sh->end() || !v->is_number_integer() || v->get<std::int64_t>() < 1) return std::nullopt;
  return v->get<std::uint64_t>();
}

std::uint64_t point_arg(const nlohmann::json& point, const char* arg, std::uint64_t dflt) {
  const auto a = point.find("args");
  if (a == point.end() || !a->is_object()) return dflt;
  const auto v = a->find(arg);
  return v != a->end() && v->is_number_integer() && v->get<std::int64_t>() >= 0 ? v->get<std::uint64_t>() : dflt;
}

std::string point_dtype(const nlohmann::json& point) {
  const auto d = point.find("dtype");
  return d != point.end() && d->is_string() ? d->get<std::string>() : "";
}

namespace {

double number_at(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* at = &j;
  for (const char* k : path) {
    if (!at->is_object() || !at->contains(k)) return 0;
    at = &(*at)[k];
  }
  return at->is_number() ? at->get<double>() : 0;
}

}  // namespace

MeasuredCurves MeasuredCurves::from_results(const nlohmann::json& results, const std::string& origin) {
  if (!results.is_object() || !results.contains("benchmarks") || !results["benchmarks"].is_array())
    throw InputError(origin + ": not a phasebench results file (no \"benchmarks\" list); give the JSON a `phasebench run` wrote");
  MeasuredCurves c;
  const auto& registry = OpRegistry::get();
  for (const auto& b : results["benchmarks"]) {
    if (!b.is_object() || !b.contains("phasebench") || !b["phasebench"].is_object()) continue;
    const auto& p = b["phasebench"];
    if (!p.contains("status") || p["status"] != "ok") continue;
    // The kind: "op_kind" (in files before schema 4 "op" was the model's op name, "gemv").
    const auto name = p.contains("op_kind") ? p.find("op_kind") : p.find("op");
    if (name == p.end() || !name->is_string()) continue;
    const std::string kind = registry.current_kind(name->get<std::string>());
    const OpDecl* decl = nullptr;
    for (const auto& d : registry.ops())
      if (d.kind == kind) decl = &d;
    if (!decl || !decl->match_point) continue;
    const auto m = decl->match_point(p);
    if (!m) continue;
    const double flops = number_at(p, {"flops"}), bytes = number_at(p, {"bytes", "total"});
    const double P = number_at(p, {"roofline", "peak_flops_per_s"}), W = number_at(p, {"roofline", "bandwidth_bytes_per_s"});
    const double t = number_at(p, {"time", "median_s"});
    if (!(t > 0) || !std::isfinite(t)) continue;
    if (!m->time_curve && (!(W > 0) || (flops > 0 && !(P > 0)))) continue;
    const double eff = m->time_curve ? t : roofline_time(flops, bytes, P, W) / t;
    if (!(eff > 0) || !std::isfinite(eff)) continue;
    auto& curve = c.curves_[m->key];
    if (curve.values.empty()) {
      curve.values.resize(m->axes.size());
      curve.peak_flops = P;
      curve.bandwidth = W;
      curve.time = m->time_curve;
    }
    // A declaration bug; never mix dimensions or kinds of curve.
    if (curve.values.size() != m->axes.size() || curve.time != m->time_curve) continue;
    for (std::size_t i = 0; i < m->axes.size(); ++i) {
      auto& v = curve.values[i];
      if (std::find(v.begin(), v.end(), m->axes[i]) == v.end()) {
        v.push_back(m->axes[i]);
        std::sort(v.begin(), v.end());
      }
    }
    auto [it, fresh] = curve.best.emplace(m->axes, eff);
    // The fastest implementation of the shape: the highest fraction, or the shortest time.
    if (!fresh) it->second = curve.time ? std::min(it->second, eff) : std::max(it->second, eff);
    ++c.points_;
  }
  return c;
}

std::optional<MeasuredCurves::Hit> MeasuredCurves::at(const StepMatch& m) const {
  const auto it = curves_.find(m.key);
  if (it == curves_.end() || it->second.values.size() != m.axes.size() || it->second.time != m.time_curve)
    return std::nullopt;
  const Curve& c = it->second;
  const std::size_t d = m.axes.size();
  std::vector<double> lo(d), hi(d), t(d);
  for (std::size_t i = 0; i < d; ++i) {
    const auto& v = c.values[i];
    const double q = m.axes[i];
    if (v.empty() || q < v.front() || q > v.back()) return std::nullopt;
    const auto up = std::lower_bound(v.begin(), v.end(), q);
    hi[i] = *up;
    lo[i] = *up == q ? q : *(up - 1);
    t[i] = hi[i] == lo[i] ? 0.0 : (std::log(q) - std::log(lo[i])) / (std::log(hi[i]) - std::log(lo[i]));
  }
  double eff = 0;
  for (std::size_t corner = 0; corner < (std::size_t{1} << d); ++corner) {
    std::vector<double> at(d);
    double w = 1;
    for (std::size_t i = 0; i < d; ++i) {
      const bool upper = (corner >> i) & 1;
      at[i] = upper ? hi[i] : lo[i];
      w *= upper ? t[i] : 1 - t[i];
    }
    if (w == 0) continue;
    const auto e = c.best.find(at);
    if (e == c.best.end()) return std::nullopt;
    eff += w * e->second;
  }
  if (c.time) return Hit{0, 0, 0, eff};
  return Hit{eff, c.peak_flops, c.bandwidth};
}

// ---- the step-time model ------------------------------------------------------------------

namespace {

bool is_attention(const LayerOp& op) { return op.kind == "prefill_attention" || op.kind == "decode_attention"; }
bool is_logits(const LayerOp& op) { return op.name == "lm_head" || op.name == "logits_all_gather"; }
bool named(const std::vector<std::string>& names, const std::string& n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}
std::vector<std::string> names_of(const std::vector<LayerOp>& ops) {
  std::vector<std::string> n;
  for (const auto& o : ops) n.push_back(o.name);
  return n;
}
std::uint64_t key2(std::uint64_t a, std::uint64_t b) { return (a << 32) ^ b; }

}  // namespace

StepTimeModel::StepTimeModel(const ModelConfig& m, const EstimateInputs& in, Ceilings ceil, CeilingSource source,
                             LinkModel link, std::string device, double efficiency)
    : shard_(tensor_parallel_shard(m, in.tp)),
      in_(in),
      precision_(step_precision(m, in)),
      ceil_(std::move(ceil)),
      source_(source),
      link_(std::move(link)),
      device_(std::move(device)),
      efficiency_(efficiency) {
  if (!(efficiency > 0 && efficiency <= 1))
    throw InputError("--efficiency must be in (0, 1] (the fraction of the roofline the ops no measured point covers reach)");
  // Ops one phase's steps have and the other's do not (MLA's expanded kv_b_proj in
  // prefill, its absorbed q/v products in decode) run over that phase's tokens only.
  const auto pre = names_of(step_ops(shard_, {Phase::prefill, 1, 1, 0}, precision_));
  const auto dec = names_of(step_ops(shard_, {Phase::decode, 1, 1, 1}, precision_));
  for (const auto& n : pre)
    if (!named(dec, n)) prefill_only_.push_back(n);
  for (const auto& n : dec)
    if (!named(pre, n)) decode_only_.push_back(n);
}

std::size_t StepTimeModel::op_index(const LayerOp& op) {
  const std::string name = op.variant.empty() ? op.name : op.name + " (" + op.variant + ")";
  const auto [it, fresh] = op_ids_.emplace(name, uses_.size());
  if (fresh) uses_.push_back({name});
  return it->second;
}

template <class Keep>
StepTimeModel::Part StepTimeModel::time_ops(const std::vector<LayerOp>& ops, std::uint64_t tokens, Keep keep, double scale) {
  Part part;
  const auto& registry = OpRegistry::get();
  for (auto op : ops) {
    if (!keep(op)) continue;
    if (scale != 1.0) {  // a share of the op's work (an MLA chunk's part of a longer prefill)
      const auto shrink = [scale](std::uint64_t& v) {
        v = static_cast<std::uint64_t>(std::llround(static_cast<double>(v) * scale));
      };
      shrink(op.cost.flops);
      for (auto* b : {&op.cost.bytes.weights, &op.cost.bytes.kv_cache, &op.cost.bytes.activations,
                      &op.cost.bytes.block_table, &op.cost.bytes.writes})
        shrink(*b);
    }
    Contribution c{op_index(op), 0, false};
    // Measured where a curve covers the op: a fraction of the roofline applied to the op's
    // own roofline time, or a time curve's time (the collectives, whose limit is the link).
    if (curves_) {
      const StepOpView view{op, shard_, precision_, tokens, element_bytes(in_.dtype) == 1 ? DType::bf16 : in_.dtype,
                            in_.kv_dtype};
      for (const auto& d : registry.ops()) {
        if (!d.match_step_op) continue;
        const auto m = d.match_step_op(view);
        if (!m) continue;
        if (const auto hit = curves_->at(*m); hit && hit->time_s > 0) {
          c.time_s = hit->time_s;
          c.measured = true;
        } else if (hit && op.link_bytes == 0) {
          c.time_s = roofline_time(static_cast<double>(op.cost.flops), static_cast<double>(op.cost.bytes.total()),
                                   hit->peak_flops, hit->bandwidth) /
                     hit->efficiency;
          c.measured = true;
        }
        break;
      }
    }
    if (!c.measured) c.time_s = estimate_op(op, ceil_, source_, in_.dtype, link_, device_).time_s / efficiency_;
    c.time_s *= static_cast<double>(op.count);
    part.push_back(c);
  }
  return part;
}

template <class Make>
const StepTimeModel::Part& StepTimeModel::memo(std::unordered_map<std::uint64_t, Part>& cache, std::uint64_t key,
                                               Make make) {
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make()).first;
  return it->second;
}

const StepTimeModel::Part& StepTimeModel::tokens_part(std::uint64_t M) {
  return memo(tokens_, M, [&] {
    return time_ops(step_ops(shard_, {Phase::prefill, 1, M, 0}, precision_), M, [&](const LayerOp& op) {
      return !is_attention(op) && !is_logits(op) && !named(prefill_only_, op.name);
    });
  });
}

const StepTimeModel::Part& StepTimeModel::prefill_only_part(std::uint64_t M) {
  return memo(prefill_only_parts_, M, [&] {
    return time_ops(step_ops(shard_, {Phase::prefill, 1, M, 0}, precision_), M,
                    [&](const LayerOp& op) { return !is_attention(op) && named(prefill_only_, op.name); });
  });
}

const StepTimeModel::Part& StepTimeModel::decode_only_part(std::uint64_t B) {
  return memo(decode_only_parts_, B, [&] {
    return time_ops(step_ops(shard_, {Phase::decode, B, 1, 1}, precision_), B,
                    [&](const LayerOp& op) { return !is_attention(op) && named(decode_only_, op.name); });
  });
}

const StepTimeModel::Part& StepTimeModel::logits_part(std::uint64_t rows) {
  // A decode step computes logits for every one of its tokens: `rows` of them.
  return memo(logits_, rows, [&] {
    return time_ops(step_ops(shard_, {Phase::decode, rows, 1, 1}, precision_), rows,
                    [](const LayerOp& op) { return is_logits(op); });
  });
}

const StepTimeModel::Part& StepTimeModel::decode_attention_part(std::uint64_t B, std::uint64_t L) {
  return memo(decode_attention_, key2(B, L), [&] {
    return time_ops(step_ops(shard_, {Phase::decode, B, 1, L}, precision_), B,
                    [](const LayerOp& op) { return is_attention(op); });
  });
}

const StepTimeModel::Part& StepTimeModel::chunk_attention_part(std::uint64_t c, std::uint64_t prior) {
  return memo(chunk_attention_, key2(c, prior), [&] { return chunk_attention(c, prior); });
}

StepTimeModel::Part StepTimeModel::chunk_attention(std::uint64_t c, std::uint64_t prior) {
  Part part;
  if (prior == 0) {
    part = time_ops(step_ops(shard_, {Phase::prefill, 1, c, 0}, precision_), c,
                    [](const LayerOp& op) { return is_attention(op); });
  } else if (!shard_.uses_mla()) {
    // A chunk after a cached prefix (FlashInfer's append attention): its c queries
    // read the cache as the multi-token decode formula reads it (its first token sees
    // prior + 1 keys; a sliding-window layer at most its window of the prefix), and
    // compute the query-key pairs a prefill over prefix and chunk has beyond one over
    // the prefix (within windows and chunks as the prefill counts them).
    auto ops = step_ops(shard_, {Phase::decode, 1, c, prior + 1}, precision_);
    const auto whole = step_ops(shard_, {Phase::prefill, 1, prior + c, 0}, precision_);
    const auto prefix = step_ops(shard_, {Phase::prefill, 1, prior, 0}, precision_);
    auto flops_of = [](const std::vector<LayerOp>& v, const LayerOp& op) -> std::optional<std::uint64_t> {
      for (const auto& o : v)
        if (is_attention(o) && o.name == op.name && o.variant == op.variant) return o.cost.flops;
      return std::nullopt;
    };
    for (auto& op : ops) {
      if (!is_attention(op)) continue;
      const auto hi = flops_of(whole, op), lo = flops_of(prefix, op);
      if (hi && lo && *hi >= *lo) op.cost.flops = *hi - *lo;
    }
    part = time_ops(ops, c, [](const LayerOp& op) { return is_attention(op); });
  } else {
    // MLA prefills expanded; a chunk after a prefix is costed as its share of the
    // query-key pairs of a prefill over prefix and chunk (c*prior + c(c+1)/2 of
    // (prior+c)(prior+c+1)/2).
    const double n = static_cast<double>(prior + c);
    const double share = (static_cast<double>(c) * static_cast<double>(prior) + static_cast<double>(c) * (c + 1.0) / 2) /
                         (n * (n + 1) / 2);
    part = time_ops(step_ops(shard_, {Phase::prefill, 1, prior + c, 0}, precision_), c,
                    [](const LayerOp& op) { return is_attention(op); }, share);
  }
  return part;
}

double StepTimeModel::add(const Part& p) {
  double t = 0;
  for (const auto& c : p) {
    auto& u = uses_[c.op];
    ++u.lookups;
    if (c.measured) ++u.measured;
    u.time_s += c.time_s;
    t += c.time_s;
  }
  return t;
}

double StepTimeModel::step_time(const StepMix& mix) {
  const std::uint64_t B = mix.decode_contexts.size();
  std::uint64_t Mp = 0;
  for (const auto& c : mix.prefill) Mp += c.tokens;
  const std::uint64_t M = B + Mp;
  if (M == 0) throw std::logic_error("step_time: a step with no tokens");
  double t = add(tokens_part(M));
  if (Mp && !prefill_only_.empty()) t += add(prefill_only_part(Mp));
  if (B && !decode_only_.empty()) t += add(decode_only_part(B));
  if (mix.logits) t += add(logits_part(mix.logits));
  if (B) {
    // The decode batch's attention at its mean context: exact for the FLOPs and KV
    // bytes of full attention (both linear in each sequence's context).
    long double sum = 0;
    for (auto L : mix.decode_contexts) sum += L;
    const auto mean = static_cast<std::uint64_t>(std::llround(static_cast<double>(sum / B)));
    t += add(decode_attention_part(B, std::max<std::uint64_t>(mean, 1)));
  }
  for (const auto& c : mix.prefill) {
    t += add(chunk_attention_part(c.tokens, c.prior));
    // MLA's expanded prefill up-projects the cached prefix's latents too (kv_b_proj).
    if (c.prior && shard_.uses_mla() && !prefill_only_.empty()) t += add(prefill_only_part(c.prior));
  }
  return t;
}

std::vector<StepTimeModel::OpUse> StepTimeModel::uses() const { return uses_; }

}  // namespace phasebench
