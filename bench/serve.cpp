// `phasebench serve`: the serving view. Its flags, the step-time model it builds
// (from a results file's measured points, or the analytical model alone), the
// sweep of simulations (serve.hpp), and the table, picture and JSON it prints.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <tuple>

#include "commands.hpp"
#include "phasebench/error.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/json_file.hpp"
#include "phasebench/serve.hpp"
#include "sweep.hpp"

namespace phasebench {

namespace {

constexpr int kServeSchemaVersion = 1;
const char* const kTpotDefinition =
    "time per output token after the first: (last token time - first token time) / (output tokens - 1), per request "
    "(vLLM's TPOT; requests of one output token have none)";
const char* const kLeftOut[] = {
    "CPU-side scheduling, batching and sampling overhead between steps, unless --step-overhead-us gives it",
    "detokenization and the network between client and server",
    "activation and workspace memory (the KV capacity is memory x utilization - weights)",
    "prefix caching and speculative decoding",
    "disaggregated: links shared by concurrent KV transfers (each transfer gets the whole link)",
};

struct ServeFlags {
  std::string model = "llama-3.1-8b", config, gpu, results, dtype, kv_dtype, weight_dtype, concurrency, rate, trace;
  std::string input = "1024", output = "128", disaggregate, out;
  std::int64_t tp = 1, requests = 0, seed = 0, max_tokens = 8192, max_seqs = 256, block = 16, kv_capacity = 0;
  double utilization = 0.9, efficiency = 0.7, slo_ttft_ms = 1000, slo_tpot_ms = 50, attainment = 0.9, overhead_us = 0;
  bool json = false, overwrite = false;
};

// The device whose step times and memory the simulation uses.
struct Device {
  std::string name, key, source;  // source: "spec table" or "results file"
  Ceilings ceilings;
  CeilingSource ceiling = CeilingSource::datasheet;
  std::uint64_t memory_bytes = 0;
  LinkModel link;
  std::string memory_from;
};

// The most frequent dtype of the results' points of a 16- or 32-bit or fp8 type (the run's --dtype).
std::string results_dtype(const nlohmann::json& r) {
  std::map<std::string, int> n;
  for (const auto& b : r.value("benchmarks", nlohmann::json::array())) {
    const auto& p = b.value("phasebench", nlohmann::json::object());
    const std::string d = p.value("status", "") == "ok" ? p.value("dtype", "") : "";
    if (d == "fp32" || d == "fp16" || d == "bf16" || d == "fp8") ++n[d];
  }
  std::string best;
  for (const auto& [d, c] : n)
    if (best.empty() || c > n[best]) best = d;
  return best;
}

Device results_device(const nlohmann::json& r, const std::string& path, DType dtype) {
  const auto& pb = r.at("context").at("phasebench");
  Device d;
  d.source = "results file";
  d.ceiling = CeilingSource::measured;
  const auto& dev = pb.value("device", nlohmann::json::object());
  d.name = dev.value("name", "unknown device");
  d.key = dev.value("slug", "");
  if (dev.contains("memory_bytes") && dev["memory_bytes"].is_number_unsigned()) {
    d.memory_bytes = dev["memory_bytes"].get<std::uint64_t>();
    d.memory_from = "the results file's device";
  }
  // Every ceiling the run recorded, each with its own source; the measured ones are preferred.
  const auto c = pb.value("ceilings", nlohmann::json::object());
  auto each = [](const nlohmann::json& list, const char* field, auto&& add) {
    if (!list.is_array()) return;
    for (const auto& e : list)
      if (e.is_object() && e.contains(field) && e[field].is_number() && e[field].get<double>() > 0)
        add(Ceiling{e[field].get<double>(), parse_ceiling_source(e.value("source", "measured")), e.value("method", "")});
  };
  each(c.value("bandwidth", nlohmann::json()), "bytes_per_s", [&](Ceiling x) { d.ceilings.add_bandwidth(std::move(x)); });
  if (!d.ceilings.bandwidth_for(CeilingSource::measured))
    throw InputError(path + ": no memory bandwidth in context.phasebench.ceilings; give a results file phasebench run wrote");
  const auto compute = c.value("compute", nlohmann::json::object());
  if (compute.is_object())
    for (const auto& [name, list] : compute.items())
      each(list, "flops_per_s", [&](Ceiling x) { d.ceilings.add_compute(parse_dtype(name), std::move(x)); });
  if (!d.ceilings.compute_for(dtype, CeilingSource::measured))
    throw InputError(path + ": no " + std::string(to_string(dtype)) +
                     " compute ceiling in context.phasebench.ceilings; give the --dtype the file was run with");
  if (dev.contains("spec") && dev["spec"].is_object() && dev["spec"].contains("key")) {
    const auto spec = GpuTable::load().find(dev["spec"]["key"].get<std::string>());
    if (spec) {
      d.link = LinkModel::of(*spec);
      if (!d.memory_bytes) {
        d.memory_bytes = spec->memory_bytes;
        d.memory_from = spec->key + "'s spec";
      }
    }
  }
  return d;
}

Device spec_device(const GpuSpec& g) {
  Device d;
  d.name = g.name;
  d.key = g.key;
  d.source = "spec table";
  d.ceilings = g.ceilings();
  d.memory_bytes = g.memory_bytes;
  d.link = LinkModel::of(g);
  d.memory_from = g.key + "'s spec";
  return d;
}

std::string seconds_text(const std::optional<double>& s) {
  if (!s) return "-";
  if (*s >= 1) return fmt::format("{:.2f} s", *s);
  if (*s >= 1e-3) return fmt::format("{:.1f} ms", *s * 1e3);
  return fmt::format("{:.0f} us", *s * 1e6);
}

// A terminal picture of the sweep: tokens/s per GPU over tokens/s per user, each
// point by its row number, '*' after the numbers of those that meet the SLOs.
std::string picture(const std::vector<ServePoint>& pts) {
  constexpr int W = 60, H = 14;
  double xmax = 0, ymax = 0;
  for (const auto& p : pts) {
    xmax = std::max(xmax, p.output_tokens_per_s_per_user);
    ymax = std::max(ymax, p.output_tokens_per_s_per_gpu);
  }
  if (!(xmax > 0) || !(ymax > 0)) return "";
  std::vector<std::string> grid(H + 1, std::string(W + 1, ' '));
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const int x = static_cast<int>(std::lround(pts[i].output_tokens_per_s_per_user / xmax * W));
    const int y = H - static_cast<int>(std::lround(pts[i].output_tokens_per_s_per_gpu / ymax * H));
    const std::string label = std::to_string(i + 1) + (pts[i].meets_slo ? "*" : "");
    const int at = std::min(x, W + 1 - static_cast<int>(label.size()));  // the whole label inside the frame
    for (std::size_t k = 0; k < label.size(); ++k) grid[y][static_cast<std::size_t>(at) + k] = label[k];
  }
  std::string out = fmt::format("\n  output tokens/s per GPU (up to {:.0f}) against tokens/s per user (up to {:.1f}); "
                                "numbers: the rows above, *: meets the SLOs\n",
                                ymax, xmax);
  for (int y = 0; y <= H; ++y) out += "  |" + grid[y] + "\n";
  out += "  +" + std::string(W + 1, '-') + "> tokens/s per user\n";
  return out;
}

void write_new_file(const std::string& path, const std::string& text, bool overwrite, const std::string& results) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!results.empty() && fs::equivalent(path, results, ec))
    throw InputError("--out " + path + " is the --results file; give another path");
  if (fs::exists(path, ec)) {
    if (!fs::is_regular_file(path, ec)) throw InputError("--out " + path + ": not a regular file; give a file path");
    if (!overwrite) throw InputError("--out " + path + " exists; give another path, or --overwrite to replace it");
  }
  const std::string tmp = path + ".tmp-phasebench";
  {
    std::ofstream f(tmp);
    if (!(f << text)) throw InputError("--out " + path + ": cannot write " + tmp);
  }
  fs::rename(tmp, path, ec);
  if (ec) throw InputError("--out " + path + ": cannot write it (" + ec.message() + ")");
}

// "2P3D": prefill and decode replicas.
std::pair<std::uint64_t, std::uint64_t> parse_xpyd(const std::string& s) {
  const std::string how = "--disaggregate " + s + ": give xPyD, prefill and decode replicas (e.g. 1P1D, 2P3D)";
  const auto p = s.find_first_of("Pp"), d = s.find_first_of("Dd");
  if (p == std::string::npos || d != s.size() - 1 || p == 0 || d <= p + 1) throw InputError(how);
  const auto x = s.substr(0, p), y = s.substr(p + 1, d - p - 1);
  for (const auto& n : {x, y})
    if (n.find_first_not_of("0123456789") != std::string::npos || n.size() > 3 || std::stoul(n) == 0) throw InputError(how);
  return {std::stoul(x), std::stoul(y)};
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  CLI::App app{"Serving simulation: continuous batching with chunked prefill over a request workload, each step timed "
               "from measured points (--results) or the analytical model; TTFT, TPOT, ITL, throughput and goodput.",
               "phasebench serve"};
  ServeFlags f;
  app.add_option("--model", f.model, "shipped model short name (see `phasebench models`)")->capture_default_str();
  app.add_option("--config", f.config, "path to a Hugging Face config.json (overrides --model)");
  app.add_option("--gpu", f.gpu,
                 "GPU from the spec table: its datasheet ceilings, memory and interconnect (default h100-sxm; with "
                 "--results: memory and interconnect only, the step times stay the file's)");
  app.add_option("--results", f.results,
                 "a phasebench results file: ops whose shapes its points cover take their measured times");
  app.add_option("--dtype", f.dtype, "weights/activations (default bf16; with --results the file's)");
  app.add_option("--kv-dtype", f.kv_dtype, "KV cache element type (default: --dtype, 16-bit for 8-bit weights)");
  app.add_option("--weight-dtype", f.weight_dtype, "the linear layers' weights (as phasebench model --weight-dtype)");
  app.add_option("--tp", f.tp, "tensor-parallel GPUs per replica (the model's sharding; collectives on the interconnect)")
      ->capture_default_str();
  app.add_option("--concurrency", f.concurrency,
                 "closed-loop users, a list (1,8,64 or 1..64): each sends its next request when the last finishes "
                 "(default 1,4,16,64 unless --rate or --trace)");
  app.add_option("--rate", f.rate, "Poisson arrivals, requests per second, a list (0.5,1,2)");
  app.add_option("--trace", f.trace, "requests from a file: CSV (arrival_s,input_tokens,output_tokens) or JSON Lines");
  app.add_option("--requests", f.requests,
                 "requests per sweep point (default: 10 x concurrency, at least 200; 500 at a rate)");
  app.add_option("--input-len", f.input, "prompt tokens: N, uniform:LO:HI or lognormal:MEDIAN:SIGMA")->capture_default_str();
  app.add_option("--output-len", f.output, "output tokens (as --input-len)")->capture_default_str();
  app.add_option("--seed", f.seed, "seed of the lengths and arrivals")->capture_default_str();
  app.add_option("--max-num-batched-tokens", f.max_tokens, "token budget of a step (vLLM's)")->capture_default_str();
  app.add_option("--max-num-seqs", f.max_seqs, "sequences a step runs at most (vLLM's)")->capture_default_str();
  app.add_option("--block-size", f.block, "tokens per KV-cache block")->capture_default_str();
  app.add_option("--gpu-memory-utilization", f.utilization, "share of the memory for weights and KV cache (vLLM's)")
      ->capture_default_str();
  app.add_option("--kv-capacity-tokens", f.kv_capacity, "KV-cache slots per replica (default: from the memory)");
  app.add_option("--efficiency", f.efficiency,
                 "fraction of the roofline the ops no measured point covers are taken to reach (1: the roofline itself)")
      ->capture_default_str();
  app.add_option("--step-overhead-us", f.overhead_us,
                 "host time each step adds, microseconds (scheduling, input preparation, sampling; 0 leaves it out)")
      ->capture_default_str();
  app.add_option("--slo-ttft", f.slo_ttft_ms, "TTFT target, milliseconds")->capture_default_str();
  app.add_option("--slo-tpot", f.slo_tpot_ms, "TPOT target, milliseconds")->capture_default_str();
  app.add_option("--slo-attainment", f.attainment, "share of requests that must meet both for a point to meet the SLOs")
      ->capture_default_str();
  app.add_option("--disaggregate", f.disaggregate,
                 "xPyD: x prefill and y decode replicas, the KV cache sent over the GPU's interconnect (e.g. 1P1D)");
  app.add_flag("--json", f.json, "print the JSON (docs/serve-json.md) instead of the table");
  app.add_option("-o,--out", f.out, "also write the JSON here (never replaced without --overwrite)");
  app.add_flag("--overwrite", f.overwrite, "replace the --out file if it exists");
  std::string command_line = "phasebench serve";
  for (int i = 1; i < argc; ++i) command_line += std::string(" ") + argv[i];
  return run_cli(app, argc, argv, [&]() -> int {
    if (!f.config.empty() && !std::filesystem::exists(f.config))
      throw InputError("--config '" + f.config + "': no such file; give the path of a Hugging Face config.json");
    const int sources = !f.concurrency.empty() + !f.rate.empty() + !f.trace.empty();
    if (sources > 1) throw InputError("give one of --concurrency, --rate and --trace");
    constexpr std::int64_t kMostRequests = 10'000'000;
    if (app.count("--requests") && (f.requests < 1 || f.requests > kMostRequests))
      throw InputError("--requests must be a whole number from 1 to 10^7, got " + std::to_string(f.requests));
    if (app.count("--requests") && !f.trace.empty())
      throw InputError("--requests does not apply to --trace: the trace's rows are the requests");
    auto positive = [](std::int64_t v, const char* flag) {
      if (v < 1) throw InputError(std::string(flag) + " must be a positive integer, got " + std::to_string(v));
      return static_cast<std::uint64_t>(v);
    };
    if (!(f.utilization > 0 && f.utilization <= 1)) throw InputError("--gpu-memory-utilization must be in (0, 1]");
    if (!(f.slo_ttft_ms > 0) || !(f.slo_tpot_ms > 0)) throw InputError("--slo-ttft and --slo-tpot must be positive milliseconds");
    if (!(f.attainment > 0 && f.attainment <= 1)) throw InputError("--slo-attainment must be in (0, 1]");
    if (f.seed < 0) throw InputError("--seed must be 0 or more");

    // The model and its precision.
    auto m = load_model(f.config.empty() ? f.model : f.config);
    nlohmann::json results;
    if (!f.results.empty()) {
      results = read_json_file(f.results, "--results");
      if (!results.is_object() || !results.contains("context") || !results["context"].contains("phasebench"))
        throw InputError("--results " + f.results + ": not a phasebench results file; give the JSON `phasebench run` wrote");
    }
    // A results file of another shape than phasebench writes: one line, never nlohmann's exception.
    auto from_results = [&](auto&& read) {
      try {
        return read();
      } catch (const nlohmann::json::exception& e) {
        throw InputError("--results " + f.results + ": not laid out as a phasebench results file (" + e.what() + ")");
      }
    };
    std::string dtype = f.dtype;
    if (dtype.empty()) dtype = f.results.empty() ? "bf16" : from_results([&] { return results_dtype(results); });
    if (dtype.empty()) throw InputError("--results " + f.results + ": no measured points to take a dtype from");
    EstimateInputs in;
    in.dtype = parse_run_dtype(dtype);
    in.kv_dtype = f.kv_dtype.empty() ? (element_bytes(in.dtype) == 1 ? DType::bf16 : in.dtype) : parse_run_dtype(f.kv_dtype);
    if (!f.weight_dtype.empty()) in.weights = WeightFormat::parse(f.weight_dtype);
    in.tp = positive(f.tp, "--tp");

    // The device: the results file's, else the spec table's; memory and link from --gpu when given.
    Device dev;
    std::vector<std::string> notes;
    if (!f.results.empty()) {
      dev = from_results([&] { return results_device(results, f.results, in.dtype); });
      if (!f.gpu.empty()) {
        const auto g = GpuTable::load().get(f.gpu);
        dev.memory_bytes = g.memory_bytes;
        dev.link = LinkModel::of(g);
        dev.memory_from = g.key + "'s spec (--gpu)";
        if (dev.key != g.key)
          notes.push_back("step times measured on " + dev.name + "; memory and interconnect from " + g.name +
                          " (--gpu): a what-if, not one machine");
      }
    } else {
      dev = spec_device(GpuTable::load().get(f.gpu.empty() ? "h100-sxm" : f.gpu));
    }

    StepTimeModel stm(m, in, dev.ceilings, dev.ceiling, dev.link, dev.name, f.efficiency);
    std::size_t measured_points = 0;
    if (!f.results.empty()) {
      auto curves = from_results([&] { return MeasuredCurves::from_results(results, f.results); });
      measured_points = curves.points();
      if (curves.points() == 0)
        notes.push_back(f.results + " has no point that stands for a step's op; every op is analytical");
      stm.use_measured(std::move(curves));
    }

    // The engine.
    EngineConfig e;
    e.max_num_batched_tokens = positive(f.max_tokens, "--max-num-batched-tokens");
    e.max_num_seqs = positive(f.max_seqs, "--max-num-seqs");
    e.block_size = positive(f.block, "--block-size");
    e.step_overhead_s = f.overhead_us * 1e-6;
    if (e.max_num_batched_tokens < e.max_num_seqs)  // as vLLM refuses it: the last sequences would starve
      throw InputError("--max-num-batched-tokens (" + std::to_string(e.max_num_batched_tokens) +
                       ") must be at least --max-num-seqs (" + std::to_string(e.max_num_seqs) +
                       "), or a step could not decode every running sequence; raise it or lower --max-num-seqs");
    e.gpus_per_replica = in.tp;
    const auto& shard = stm.shard();
    e.kv_bytes_per_token = kv_bytes_per_token(shard, stm.precision().c);
    const auto weights = weight_bytes(shard, stm.precision());
    if (f.kv_capacity > 0 || app.count("--kv-capacity-tokens")) {
      e.kv_capacity_tokens = positive(f.kv_capacity, "--kv-capacity-tokens");
    } else {
      if (!dev.memory_bytes)
        throw InputError("no memory size for " + dev.name + "; give --gpu or --kv-capacity-tokens");
      const double room = static_cast<double>(dev.memory_bytes) * f.utilization - static_cast<double>(weights);
      if (room < static_cast<double>(e.kv_bytes_per_token * e.block_size))
        throw InputError(fmt::format("the weights ({:.1f} GB per GPU) leave no room for a KV cache in {:.1f} GB x {} "
                                     "({}); use --tp, a smaller --weight-dtype, or --kv-capacity-tokens",
                                     weights / 1e9, dev.memory_bytes / 1e9, f.utilization, dev.memory_from));
      e.kv_capacity_tokens = static_cast<std::uint64_t>(room / static_cast<double>(e.kv_bytes_per_token));
    }
    if (!f.disaggregate.empty()) {
      std::tie(e.prefill_replicas, e.decode_replicas) = parse_xpyd(f.disaggregate);
      if (!(dev.link.gbps > 0))
        throw InputError("--disaggregate sends the KV cache over the interconnect: " + dev.name +
                         " has none in the spec table; give --gpu with one");
      e.kv_transfer_bytes_per_s = dev.link.gbps * 1e9 / 2;  // one direction of the bidirectional figure
    }

    // The workload and the sweep.
    Workload w;
    w.input = LengthDist::parse(f.input, "--input-len");
    w.output = LengthDist::parse(f.output, "--output-len");
    w.seed = static_cast<std::uint64_t>(f.seed);
    std::vector<std::uint64_t> concurrencies;
    std::vector<double> rates;
    if (!f.trace.empty()) {
      w.kind = Workload::Kind::trace;
      w.trace = read_trace(f.trace);
      w.trace_path = f.trace;
      w.requests = w.trace.size();
    } else if (!f.rate.empty()) {
      w.kind = Workload::Kind::rate;
      rates = parse_rate_list(f.rate, "--rate");
    } else {
      w.kind = Workload::Kind::concurrency;
      concurrencies = parse_size_list(f.concurrency.empty() ? "1,4,16,64" : f.concurrency, "--concurrency");
      for (auto c : concurrencies)
        if (c > 1'000'000) throw InputError("--concurrency " + std::to_string(c) + ": at most 10^6 users");
    }
    const Slo slo{f.slo_ttft_ms / 1e3, f.slo_tpot_ms / 1e3, f.attainment};
    const StepTimeFn step = [&](const StepMix& mix) { return stm.step_time(mix); };
    std::vector<ServePoint> points;
    const bool progress = !f.json && ::isatty(STDERR_FILENO);  // a live line on a terminal only
    const std::size_t n_points = w.kind == Workload::Kind::trace ? 1 : std::max(concurrencies.size(), rates.size());
    for (std::size_t i = 0; i < n_points; ++i) {
      Workload wi = w;
      std::optional<std::uint64_t> c;
      if (w.kind == Workload::Kind::concurrency) {
        c = concurrencies[i];
        wi.concurrency = *c;
        wi.requests = f.requests > 0 ? static_cast<std::uint64_t>(f.requests) : std::max<std::uint64_t>(200, 10 * *c);
      } else if (w.kind == Workload::Kind::rate) {
        wi.rate = rates[i];
        wi.requests = f.requests > 0 ? static_cast<std::uint64_t>(f.requests) : 500;
      }
      if (progress) std::cerr << fmt::format("\rserve: point {}/{} ", i + 1, n_points) << std::flush;
      auto p = simulate(e, draw_requests(wi), c, step, slo);
      if (w.kind == Workload::Kind::rate) p.rate = rates[i];
      points.push_back(std::move(p));
    }
    if (progress) std::cerr << "\r" << std::string(24, ' ') << "\r" << std::flush;
    mark_pareto(points);

    // Which ops were measured.
    double total = 0;
    const auto uses = stm.uses();
    for (const auto& u : uses) total += u.time_s;
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& u : uses)
      ops.push_back({{"op", u.op},
                     {"lookups", u.lookups},
                     {"measured_share", u.lookups ? static_cast<double>(u.measured) / static_cast<double>(u.lookups) : 0.0},
                     {"time_share", total > 0 ? u.time_s / total : 0.0}});

    nlohmann::json doc = {
        {"kind", "phasebench serve"},
        {"schema_version", kServeSchemaVersion},
        {"command_line", command_line},
        {"model", m.name},
        {"device", {{"name", dev.name}, {"key", dev.key}, {"source", dev.source}, {"memory_bytes", dev.memory_bytes},
                    {"memory_from", dev.memory_from}, {"interconnect_gbps", dev.link.gbps}}},
        {"dtype", to_string(in.dtype)},
        {"kv_dtype", to_string(in.kv_dtype)},
        {"tp", in.tp},
        {"step_times", {{"source", f.results.empty() ? "analytical" : "measured"},
                        {"results_file", f.results.empty() ? nlohmann::json() : nlohmann::json(f.results)},
                        {"measured_points", measured_points},
                        {"efficiency", f.efficiency},
                        {"ceilings", to_string(dev.ceiling)},
                        {"ops", ops}}},
        {"engine", {{"mode", e.disaggregated() ? "disaggregated" : "colocated"},
                    {"prefill_replicas", e.prefill_replicas},
                    {"decode_replicas", e.decode_replicas},
                    {"max_num_batched_tokens", e.max_num_batched_tokens},
                    {"max_num_seqs", e.max_num_seqs},
                    {"step_overhead_s", e.step_overhead_s},
                    {"block_size", e.block_size},
                    {"gpu_memory_utilization", f.utilization},
                    {"weights_bytes_per_gpu", weights},
                    {"kv_bytes_per_token_per_gpu", e.kv_bytes_per_token},
                    {"kv_capacity_tokens", e.kv_capacity_tokens},
                    {"kv_transfer_bytes_per_s", e.kv_transfer_bytes_per_s},
                    {"gpus", e.gpus()}}},
        {"workload", {{"kind", w.kind == Workload::Kind::trace ? "trace" : w.kind == Workload::Kind::rate ? "rate" : "concurrency"},
                      {"requests", points.empty() ? 0 : points.front().requests},
                      {"input", w.kind == Workload::Kind::trace ? "trace" : w.input.text},
                      {"output", w.kind == Workload::Kind::trace ? "trace" : w.output.text},
                      {"seed", w.seed},
                      {"trace", f.trace.empty() ? nlohmann::json() : nlohmann::json(f.trace)}}},
        {"slo", {{"ttft_s", slo.ttft_s}, {"tpot_s", slo.tpot_s}, {"attainment", slo.attainment}}},
        {"tpot_definition", kTpotDefinition},
        {"leaves_out", kLeftOut},
        {"notes", notes},
        {"points", nlohmann::json::array()}};
    for (const auto& p : points) doc["points"].push_back(to_json(p));
    if (!f.out.empty()) write_new_file(f.out, doc.dump(2) + "\n", f.overwrite, f.results);
    if (f.json) {
      std::cout << doc.dump(2) << "\n";
      return 0;
    }

    // The text.
    std::cout << fmt::format("serve {} on {} ({}), {} weights, {} KV cache, tp {}\n", m.name, dev.name, dev.source,
                             to_string(in.dtype), to_string(in.kv_dtype), in.tp);
    if (f.results.empty())
      std::cout << fmt::format("step times: the analytical model alone (no --results): each op at {:.0f}% of its roofline "
                               "on the datasheet ceilings\n",
                               f.efficiency * 100);
    else
      std::cout << fmt::format("step times: measured points of {} ({} points) where they cover an op's shape, else its "
                               "roofline on the file's measured ceilings at {:.0f}%\n",
                               f.results, measured_points, f.efficiency * 100);
    std::cout << fmt::format(
        "engine: {}, {} batched tokens, {} sequences per step, KV cache {} tokens per replica ({:.2f} GB weights per GPU, "
        "memory from {}){}\n",
        e.disaggregated() ? fmt::format("disaggregated {}P{}D, KV over {:.0f} GB/s", e.prefill_replicas, e.decode_replicas,
                                        e.kv_transfer_bytes_per_s / 1e9)
                          : "one replica, chunked prefill",
        e.max_num_batched_tokens, e.max_num_seqs, e.kv_capacity_tokens, weights / 1e9,
        f.kv_capacity > 0 ? "--kv-capacity-tokens" : dev.memory_from,
        e.step_overhead_s > 0 ? fmt::format(", {:g} us of host time a step", f.overhead_us) : "");
    const std::string lengths = w.kind == Workload::Kind::trace
                                    ? fmt::format("{} requests of {}", w.trace.size(), f.trace)
                                    : fmt::format("input {}, output {} tokens, seed {}", w.input.text, w.output.text, w.seed);
    std::cout << fmt::format("workload: {}; SLO: TTFT <= {} ms and TPOT <= {} ms for {:.0f}% of requests\n", lengths,
                             f.slo_ttft_ms, f.slo_tpot_ms, f.attainment * 100);
    for (const auto& n : notes) std::cout << "note: " << n << "\n";
    const char* sweep = w.kind == Workload::Kind::rate ? "rate/s" : w.kind == Workload::Kind::trace ? "trace" : "users";
    std::cout << fmt::format("\n  # {:>7} {:>6} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>5} {:>6} {:>7}\n",
                             sweep, "req/s", "tok/s/GPU", "tok/s/user", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
                             "ITL p99", "E2E p50", "goodput", "SLO", "pareto", "preempt");
    for (std::size_t i = 0; i < points.size(); ++i) {
      const auto& p = points[i];
      const std::string x = p.concurrency ? std::to_string(*p.concurrency)
                            : p.rate      ? fmt::format("{:g}", *p.rate)
                                          : "-";
      std::cout << fmt::format("{:>3} {:>7} {:>6.2f} {:>9.1f} {:>10.1f} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8.2f} {:>5} {:>6} {:>7}\n",
                               i + 1, x, p.request_rate, p.output_tokens_per_s_per_gpu, p.output_tokens_per_s_per_user,
                               seconds_text(p.ttft.p50), seconds_text(p.ttft.p99), seconds_text(p.tpot.p50),
                               seconds_text(p.tpot.p99), seconds_text(p.itl.p99), seconds_text(p.e2e.p50), p.goodput_rps,
                               p.meets_slo ? "yes" : "no", p.pareto ? "yes" : "", p.preemptions);
    }
    std::cout << "goodput: requests per second meeting both SLOs (DistServe); TPOT: " << kTpotDefinition
              << "; tok/s/user: the mean over requests of 1/TPOT\n";
    std::cout << picture(points);
    std::cout << "\nstep time by op (share of all simulated step time; measured: share of its lookups a measured point "
                 "covered)\n";
    std::vector<std::size_t> order(uses.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return uses[a].time_s > uses[b].time_s; });
    for (auto i : order) {
      const auto& u = uses[i];
      std::cout << fmt::format("  {:<34} {:>6.1f}%   {}\n", u.op, total > 0 ? 100 * u.time_s / total : 0.0,
                               u.measured == 0             ? "analytical"
                               : u.measured == u.lookups ? "measured"
                                                         : fmt::format("measured {:.0f}%", 100.0 * u.measured / u.lookups));
    }
    std::cout << "\nleft out of the simulation:";
    for (const char* s : kLeftOut) std::cout << "\n  - " << s;
    std::cout << "\n";
    if (!f.out.empty()) std::cout << "wrote " << f.out << "\n";
    return 0;
  });
}

}  // namespace phasebench
