// The serving simulation (serve.hpp): requests, replicas with vLLM's continuous
// batching and chunked prefill, events in time order, and the figures of a sweep point.
#include "phasebench/serve.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <fstream>
#include <limits>
#include <queue>
#include <sstream>

#include "phasebench/error.hpp"
#include "phasebench/json_file.hpp"

namespace phasebench {

// ---- workloads ---------------------------------------------------------------------------

namespace {

double number_in(const std::string& s, const std::string& what) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v)) throw InputError(what + ": '" + s + "' is not a number");
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

constexpr double kLognormalCapZ = 3.719;  // the 99.99th percentile of the standard normal

}  // namespace

LengthDist LengthDist::parse(const std::string& text, const std::string& flag) {
  const std::string how = flag + " " + text + ": give a token count (1024), uniform:LO:HI or lognormal:MEDIAN:SIGMA";
  LengthDist d;
  d.text = text;
  const auto parts = split(text, ':');
  auto whole = [&](const std::string& s) {
    const double v = number_in(s, how);
    if (v < 1 || v != std::floor(v) || v > 1e7) throw InputError(how + " (counts are whole numbers from 1 to 10^7)");
    return v;
  };
  if (parts.size() == 1) {
    d.kind = Kind::fixed;
    d.a = d.b = whole(parts[0]);
  } else if (parts.size() == 3 && parts[0] == "uniform") {
    d.kind = Kind::uniform;
    d.a = whole(parts[1]);
    d.b = whole(parts[2]);
    if (d.b < d.a) throw InputError(how + " (HI below LO)");
  } else if (parts.size() == 3 && parts[0] == "lognormal") {
    d.kind = Kind::lognormal;
    d.a = whole(parts[1]);
    d.b = number_in(parts[2], how);
    if (!(d.b >= 0 && d.b <= 3)) throw InputError(how + " (SIGMA from 0 to 3)");
  } else {
    throw InputError(how);
  }
  return d;
}

std::uint64_t LengthDist::largest() const {
  if (kind == Kind::lognormal) return static_cast<std::uint64_t>(std::ceil(a * std::exp(b * kLognormalCapZ)));
  return static_cast<std::uint64_t>(b);
}

std::uint64_t LengthDist::draw(std::mt19937_64& rng) const {
  switch (kind) {
    case Kind::fixed:
      return static_cast<std::uint64_t>(a);
    case Kind::uniform:
      return std::uniform_int_distribution<std::uint64_t>(static_cast<std::uint64_t>(a), static_cast<std::uint64_t>(b))(rng);
    case Kind::lognormal: {
      const double z = std::clamp(std::normal_distribution<double>(0.0, 1.0)(rng), -kLognormalCapZ, kLognormalCapZ);
      return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(a * std::exp(b * z))));
    }
  }
  return 1;
}

std::vector<double> parse_rate_list(const std::string& text, const std::string& flag) {
  const std::string how = flag + " " + text + ": give request rates per second, comma-separated (e.g. 0.5,1,2)";
  std::vector<double> out;
  for (const auto& item : split(text, ',')) {
    const double v = number_in(item, how);
    if (!(v > 0)) throw InputError(how);
    out.push_back(v);
  }
  if (out.empty()) throw InputError(how);
  return out;
}

std::vector<ServeRequest> draw_requests(const Workload& w) {
  if (w.kind == Workload::Kind::trace) return w.trace;
  std::mt19937_64 rng(w.seed);
  std::vector<ServeRequest> out(w.requests);
  double t = 0;
  for (auto& r : out) {
    r.input = w.input.draw(rng);
    r.output = w.output.draw(rng);
    if (w.kind == Workload::Kind::rate) {
      t += std::exponential_distribution<double>(w.rate)(rng);
      r.arrival_s = t;
    }
  }
  return out;
}

std::vector<ServeRequest> read_trace(const std::string& path) {
  const std::string text = read_text_file(path, "--trace");
  std::vector<ServeRequest> out;
  std::istringstream in(text);
  std::string line;
  std::size_t n = 0;
  const bool jsonl = text.find_first_not_of(" \t\r\n") != std::string::npos && text[text.find_first_not_of(" \t\r\n")] == '{';
  std::vector<std::string> header;
  auto at = [&](const std::string& what) { return path + " line " + std::to_string(n) + ": " + what; };
  auto check = [&](ServeRequest r, double input, double output) {
    if (!(r.arrival_s >= 0) || !std::isfinite(r.arrival_s)) throw InputError(at("arrival_s must be a time >= 0 in seconds"));
    for (double v : {input, output})
      if (!(v >= 1) || v != std::floor(v) || v > 1e7)
        throw InputError(at("input_tokens and output_tokens must be whole numbers from 1 to 10^7"));
    r.input = static_cast<std::uint64_t>(input);
    r.output = static_cast<std::uint64_t>(output);
    if (!out.empty() && r.arrival_s < out.back().arrival_s)
      throw InputError(at("arrival times must not decrease (sort the trace by arrival_s)"));
    out.push_back(r);
  };
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (jsonl) {
      const auto j = parse_json_text(line, path + " line " + std::to_string(n));
      if (!j.is_object()) throw InputError(at("each line must be a JSON object"));
      auto num = [&](const char* k) {
        if (!j.contains(k) || !j[k].is_number()) throw InputError(at(std::string("needs a number \"") + k + "\""));
        return j[k].get<double>();
      };
      check({num("arrival_s")}, num("input_tokens"), num("output_tokens"));
      continue;
    }
    auto cells = split(line, ',');
    for (auto& c : cells) {
      c.erase(0, c.find_first_not_of(" \t"));
      c.erase(c.find_last_not_of(" \t") + 1);
    }
    if (header.empty()) {
      header = cells;
      for (const char* k : {"arrival_s", "input_tokens", "output_tokens"})
        if (std::find(header.begin(), header.end(), k) == header.end())
          throw InputError(path + ": the CSV header must name arrival_s, input_tokens and output_tokens (got '" + line + "')");
      continue;
    }
    if (cells.size() != header.size())
      throw InputError(at(std::to_string(cells.size()) + " cells where the header has " + std::to_string(header.size())));
    auto cell = [&](const char* k) {
      const auto i = static_cast<std::size_t>(std::find(header.begin(), header.end(), k) - header.begin());
      return number_in(cells[i], at(k));
    };
    check({cell("arrival_s")}, cell("input_tokens"), cell("output_tokens"));
  }
  if (out.empty()) throw InputError(path + ": no requests (CSV with a header arrival_s,input_tokens,output_tokens, or JSON Lines)");
  return out;
}

// ---- statistics ----------------------------------------------------------------------------

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto q = [&](double f) {
    const double pos = f * static_cast<double>(v.size() - 1);
    const auto i = static_cast<std::size_t>(std::floor(pos));
    const double frac = pos - static_cast<double>(i);
    return i + 1 < v.size() ? v[i] + frac * (v[i + 1] - v[i]) : v[i];
  };
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  p.p50 = q(0.50);
  p.p90 = q(0.90);
  p.p99 = q(0.99);
  return p;
}

std::uint64_t EngineConfig::gpus() const {
  return (disaggregated() ? prefill_replicas + decode_replicas : 1) * gpus_per_replica;
}

// ---- the simulation -------------------------------------------------------------------------

namespace {

struct Req {
  ServeRequest in;
  std::uint64_t computed = 0;   // tokens whose K and V are in the replica's cache
  std::uint64_t generated = 0;  // output tokens sampled
  std::uint64_t blocks = 0;     // KV blocks held
  double first = -1, last = -1;
  bool done = false;
  std::uint64_t known() const { return in.input + generated; }  // tokens the sequence holds
};

enum class Role { mixed, prefill, decode };

struct Replica {
  Role role = Role::mixed;
  std::deque<std::size_t> waiting;
  std::vector<std::size_t> running;  // in admission order
  std::uint64_t free_blocks = 0, total_blocks = 0;
  bool busy = false;
  std::vector<std::pair<std::size_t, std::uint64_t>> step;  // the step in flight: request, tokens
  std::size_t incoming = 0;  // KV caches on their way here (disaggregated)
  std::size_t load() const { return waiting.size() + running.size() + incoming; }
};

struct Event {
  double t = 0;
  std::uint64_t seq = 0;
  enum class Kind { arrive, step_done, kv_arrive } kind = Kind::arrive;
  std::size_t replica = 0, request = 0;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

class Simulation {
 public:
  Simulation(const EngineConfig& e, std::vector<ServeRequest> requests, std::optional<std::uint64_t> concurrency,
             const StepTimeFn& step_time, const Slo& slo)
      : e_(e), step_time_(step_time), slo_(slo), concurrency_(concurrency) {
    if (e.block_size == 0) throw InputError("--block-size must be a positive number of tokens");
    const std::uint64_t blocks = e.kv_capacity_tokens / e.block_size;
    for (const auto& r : requests) {
      const auto need = (r.input + r.output + e.block_size - 1) / e.block_size;
      if (need > blocks)
        throw InputError("a request of " + std::to_string(r.input) + " input and " + std::to_string(r.output) +
                         " output tokens needs " + std::to_string(need * e.block_size) + " KV-cache slots, more than a " +
                         "replica holds (" + std::to_string(blocks * e.block_size) +
                         "); shorten the requests or give the replica more memory (--kv-capacity-tokens, --tp)");
      reqs_.push_back({r});
    }
    auto add_replicas = [&](Role role, std::uint64_t n) {
      for (std::uint64_t i = 0; i < n; ++i) {
        Replica rep;
        rep.role = role;
        rep.free_blocks = rep.total_blocks = blocks;
        replicas_.push_back(std::move(rep));
      }
    };
    if (e.disaggregated()) {
      add_replicas(Role::prefill, e.prefill_replicas);
      add_replicas(Role::decode, e.decode_replicas);
    } else {
      add_replicas(Role::mixed, 1);
    }
  }

  ServePoint run() {
    const std::size_t first_wave = concurrency_ ? std::min<std::size_t>(*concurrency_, reqs_.size()) : reqs_.size();
    for (std::size_t i = 0; i < first_wave; ++i) push(concurrency_ ? 0.0 : reqs_[i].in.arrival_s, Event::Kind::arrive, 0, i);
    issued_ = first_wave;
    while (!events_.empty()) {
      // Every event of this moment before any scheduling: requests that arrive
      // together are in the queue together when the scheduler looks.
      now_ = events_.top().t;
      while (!events_.empty() && events_.top().t == now_) {
        const Event ev = events_.top();
        events_.pop();
        handle(ev);
      }
      for (std::size_t r = 0; r < replicas_.size(); ++r)
        if (!replicas_[r].busy) start_step(r);
    }
    return figures();
  }

 private:
  void handle(const Event& ev) {
    switch (ev.kind) {
      case Event::Kind::arrive:
        reqs_[ev.request].in.arrival_s = now_;
        replicas_[pick(e_.disaggregated() ? Role::prefill : Role::mixed)].waiting.push_back(ev.request);
        break;
      case Event::Kind::kv_arrive:
        --replicas_[ev.replica].incoming;
        replicas_[ev.replica].waiting.push_back(ev.request);
        break;
      case Event::Kind::step_done:
        finish_step(ev.replica);
        break;
    }
  }

  void push(double t, Event::Kind k, std::size_t replica, std::size_t request) {
    events_.push({t, seq_++, k, replica, request});
  }

  // The replica of `role` with the fewest requests (the first of equals).
  std::size_t pick(Role role) const {
    std::size_t best = replicas_.size();
    for (std::size_t r = 0; r < replicas_.size(); ++r)
      if (replicas_[r].role == role && (best == replicas_.size() || replicas_[r].load() < replicas_[best].load())) best = r;
    return best;
  }

  std::uint64_t blocks_for(std::uint64_t tokens) const { return (tokens + e_.block_size - 1) / e_.block_size; }

  // Gives `r` the blocks for `tokens` cached tokens, if the replica has them.
  bool reserve(Replica& rep, Req& q, std::uint64_t tokens) {
    const auto need = blocks_for(tokens);
    if (need <= q.blocks) return true;
    if (need - q.blocks > rep.free_blocks) return false;
    rep.free_blocks -= need - q.blocks;
    q.blocks = need;
    return true;
  }

  void release(Replica& rep, Req& q) {
    rep.free_blocks += q.blocks;
    q.blocks = 0;
  }

  // The tokens `q` computes next, within `budget`: a chunk of what it has not
  // cached (its prompt, or everything after a preemption), else one decode token.
  std::uint64_t wants(const Req& q, std::uint64_t budget) const { return std::min(q.known() - q.computed, budget); }

  void start_step(std::size_t r) {
    Replica& rep = replicas_[r];
    std::uint64_t budget = e_.max_num_batched_tokens;
    rep.step.clear();
    bool preempted = false;
    // Running requests first, in admission order; the newest gives way when blocks run out.
    for (std::size_t i = 0; i < rep.running.size() && budget > 0;) {
      Req& q = reqs_[rep.running[i]];
      const auto n = wants(q, budget);
      if (reserve(rep, q, q.computed + n)) {
        rep.step.emplace_back(rep.running[i], n);
        budget -= n;
        ++i;
        continue;
      }
      // Preempt the most recently admitted running request (possibly q itself).
      const std::size_t victim = rep.running.back();
      rep.running.pop_back();
      Req& v = reqs_[victim];
      release(rep, v);
      v.computed = 0;
      rep.waiting.push_front(victim);
      ++preemptions_;
      preempted = true;  // (the victim sits at or after i: not scheduled in this step yet)
    }
    // New requests (or preempted ones, first) while nothing was preempted this step.
    while (!preempted && budget > 0 && !rep.waiting.empty() && rep.running.size() < e_.max_num_seqs) {
      const std::size_t id = rep.waiting.front();
      Req& q = reqs_[id];
      const auto n = wants(q, budget);
      if (!reserve(rep, q, q.computed + n)) break;
      rep.waiting.pop_front();
      rep.running.push_back(id);
      rep.step.emplace_back(id, n);
      budget -= n;
    }
    if (rep.step.empty()) {
      if (!rep.waiting.empty() && rep.running.empty())
        throw std::logic_error("serve: a replica with waiting requests scheduled nothing");
      return;
    }
    StepMix mix;
    for (const auto& [id, n] : rep.step) {
      const Req& q = reqs_[id];
      const bool samples = q.computed + n == q.known();
      if (q.generated > 0 && n == 1 && samples)
        mix.decode_contexts.push_back(q.computed + 1);
      else
        mix.prefill.push_back({n, q.computed});
      if (samples) ++mix.logits;
    }
    const double dt = step_time_(mix) + e_.step_overhead_s;
    if (!(dt > 0) || !std::isfinite(dt)) throw std::logic_error("serve: a step time that is not a positive number");
    rep.busy = true;
    ++steps_;
    batch_sum_ += static_cast<double>(rep.step.size());
    std::uint64_t used = 0;
    for (std::size_t id : rep.running) used += reqs_[id].blocks;
    peak_kv_ = std::max(peak_kv_, used * e_.block_size);
    push(now_ + dt, Event::Kind::step_done, r, 0);
  }

  void emit(Req& q) {
    ++q.generated;
    if (q.first < 0) q.first = now_;
    if (q.last >= 0) itl_.push_back(now_ - q.last);
    q.last = now_;
  }

  void finish_step(std::size_t r) {
    Replica& rep = replicas_[r];
    rep.busy = false;
    std::vector<std::size_t> leaving;
    for (const auto& [id, n] : rep.step) {
      Req& q = reqs_[id];
      q.computed += n;
      if (q.computed < q.known()) continue;  // a chunk of a longer prompt
      emit(q);
      if (q.generated >= q.in.output) {
        q.done = true;
        leaving.push_back(id);
      } else if (rep.role == Role::prefill) {
        leaving.push_back(id);  // its KV cache goes to a decode replica
      }
    }
    for (std::size_t id : leaving) {
      Req& q = reqs_[id];
      rep.running.erase(std::find(rep.running.begin(), rep.running.end(), id));
      release(rep, q);
      if (q.done) {
        ++completed_;
        if (concurrency_ && issued_ < reqs_.size()) push(now_, Event::Kind::arrive, 0, issued_++);
        continue;
      }
      // Disaggregated: the prompt's KV cache crosses the link, then joins a decode replica's queue.
      const double bytes = static_cast<double>(q.computed) * static_cast<double>(e_.kv_bytes_per_token);
      const double transfer = e_.kv_transfer_bytes_per_s > 0 ? bytes / e_.kv_transfer_bytes_per_s : 0.0;
      ++transfers_;
      const std::size_t to = pick(Role::decode);
      ++replicas_[to].incoming;
      push(now_ + transfer, Event::Kind::kv_arrive, to, id);
    }
  }

  ServePoint figures() {
    ServePoint p;
    p.concurrency = concurrency_;
    p.requests = reqs_.size();
    p.completed = completed_;
    p.gpus = e_.gpus();
    double start = std::numeric_limits<double>::infinity(), end = 0;
    std::vector<double> ttft, tpot, e2e;
    std::uint64_t tokens = 0, good = 0;
    double per_user = 0;
    std::uint64_t users = 0;
    for (const auto& q : reqs_) {
      start = std::min(start, q.in.arrival_s);
      end = std::max(end, q.last);
      tokens += q.generated;
      ttft.push_back(q.first - q.in.arrival_s);
      e2e.push_back(q.last - q.in.arrival_s);
      std::optional<double> t;
      if (q.generated > 1) {
        t = (q.last - q.first) / static_cast<double>(q.generated - 1);
        tpot.push_back(*t);
        if (*t > 0) {
          per_user += 1.0 / *t;
          ++users;
        }
      }
      if (ttft.back() <= slo_.ttft_s && (!t || *t <= slo_.tpot_s)) ++good;
    }
    p.duration_s = end - start;
    p.ttft = percentiles(ttft);
    p.tpot = percentiles(tpot);
    p.itl = percentiles(itl_);
    p.e2e = percentiles(e2e);
    if (p.duration_s > 0) {
      p.request_rate = static_cast<double>(p.completed) / p.duration_s;
      p.output_tokens_per_s = static_cast<double>(tokens) / p.duration_s;
      p.output_tokens_per_s_per_gpu = p.output_tokens_per_s / static_cast<double>(p.gpus);
      p.goodput_rps = static_cast<double>(good) / p.duration_s;
    }
    p.output_tokens_per_s_per_user = users ? per_user / static_cast<double>(users) : 0.0;
    p.slo_attainment = reqs_.empty() ? 0.0 : static_cast<double>(good) / static_cast<double>(reqs_.size());
    p.meets_slo = p.slo_attainment >= slo_.attainment;
    p.preemptions = preemptions_;
    p.steps = steps_;
    p.mean_batch = steps_ ? batch_sum_ / static_cast<double>(steps_) : 0.0;
    p.peak_kv_tokens = peak_kv_;
    p.kv_transfers = transfers_;
    return p;
  }

 private:
  const EngineConfig& e_;
  const StepTimeFn& step_time_;
  Slo slo_;
  std::optional<std::uint64_t> concurrency_;
  std::vector<Req> reqs_;
  std::vector<Replica> replicas_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<double> itl_;
  double now_ = 0, batch_sum_ = 0;
  std::uint64_t seq_ = 0, steps_ = 0, preemptions_ = 0, completed_ = 0, peak_kv_ = 0, transfers_ = 0;
  std::size_t issued_ = 0;
};

}  // namespace

ServePoint simulate(const EngineConfig& e, std::vector<ServeRequest> requests, std::optional<std::uint64_t> concurrency,
                    const StepTimeFn& step_time, const Slo& slo) {
  if (requests.empty()) throw InputError("serve: no requests to simulate (--requests must be at least 1)");
  if (concurrency && *concurrency == 0) throw InputError("--concurrency must be at least 1");
  if (e.disaggregated() != (e.decode_replicas > 0))
    throw InputError("a disaggregated engine needs prefill and decode replicas, at least one of each");
  if (!(e.step_overhead_s >= 0) || !std::isfinite(e.step_overhead_s))
    throw InputError("--step-overhead-us must be 0 or more microseconds");
  if (e.max_num_seqs == 0 || e.max_num_batched_tokens == 0)
    throw InputError("--max-num-seqs and --max-num-batched-tokens must be at least 1");
  return Simulation(e, std::move(requests), concurrency, step_time, slo).run();
}

void mark_pareto(std::vector<ServePoint>& points) {
  for (auto& p : points) {
    p.pareto = std::none_of(points.begin(), points.end(), [&](const ServePoint& o) {
      const bool ge = o.output_tokens_per_s_per_user >= p.output_tokens_per_s_per_user &&
                      o.output_tokens_per_s_per_gpu >= p.output_tokens_per_s_per_gpu;
      const bool gt = o.output_tokens_per_s_per_user > p.output_tokens_per_s_per_user ||
                      o.output_tokens_per_s_per_gpu > p.output_tokens_per_s_per_gpu;
      return ge && gt;
    });
  }
}

nlohmann::json to_json(const Percentiles& p) {
  auto v = [](const std::optional<double>& x) { return x ? nlohmann::json(*x) : nlohmann::json(); };
  return {{"mean", v(p.mean)}, {"p50", v(p.p50)}, {"p90", v(p.p90)}, {"p99", v(p.p99)}};
}

nlohmann::json to_json(const ServePoint& p) {
  return {{"concurrency", p.concurrency ? nlohmann::json(*p.concurrency) : nlohmann::json()},
          {"rate", p.rate ? nlohmann::json(*p.rate) : nlohmann::json()},
          {"requests", p.requests},
          {"completed", p.completed},
          {"duration_s", p.duration_s},
          {"gpus", p.gpus},
          {"ttft_s", to_json(p.ttft)},
          {"tpot_s", to_json(p.tpot)},
          {"itl_s", to_json(p.itl)},
          {"e2e_s", to_json(p.e2e)},
          {"request_rate", p.request_rate},
          {"output_tokens_per_s", p.output_tokens_per_s},
          {"output_tokens_per_s_per_gpu", p.output_tokens_per_s_per_gpu},
          {"output_tokens_per_s_per_user", p.output_tokens_per_s_per_user},
          {"goodput_rps", p.goodput_rps},
          {"slo_attainment", p.slo_attainment},
          {"meets_slo", p.meets_slo},
          {"pareto", p.pareto},
          {"preemptions", p.preemptions},
          {"steps", p.steps},
          {"mean_batch", p.mean_batch},
          {"peak_kv_tokens", p.peak_kv_tokens},
          {"kv_transfers", p.kv_transfers}};
}

}  // namespace phasebench
