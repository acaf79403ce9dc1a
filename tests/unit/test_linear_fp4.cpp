// The weight-only FP4 linear layer (ops/linear_fp4.hpp): its cost (the weights'
// bytes exactly matrix_bytes: values, block scales, tensor scale; bf16 X and Y),
// the request builder and its refusals, the reference's fill and exact
// dequantisation, the CPU kernel against the reference in both formats at every
// batch, the sweep group's points, and a bad format word through the CLI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cli_test_util.hpp"
#include "common/numeric.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear_fp4.hpp"
#include "reference/linear_fp4.hpp"

namespace phasebench {
namespace {

const std::string kTiny = std::string(PHASEBENCH_TEST_DATA_DIR) + "/tiny-llama.json";

TEST(LinearFp4, CostCountsTheWeightsExactlyAndBf16Activations) {
  struct Case {
    DType f;
    LinearShape s;
  };
  for (const Case c : {Case{DType::mxfp4, {1, 5760, 2880}}, Case{DType::nvfp4, {1, 5760, 2880}},
                       Case{DType::nvfp4, {16, 4096, 14336}}, Case{DType::mxfp4, {3, 67, 96}},
                       Case{DType::nvfp4, {5, 67, 48}}}) {
    SCOPED_TRACE(std::string(to_string(c.f)) + " N=" + std::to_string(c.s.N) + " K=" + std::to_string(c.s.K));
    const auto r = linear_fp4_request(c.s, c.f, Impl::own);
    const auto cost = r.cost();
    EXPECT_EQ(cost.flops, 2 * c.s.M * c.s.N * c.s.K);
    const Fp4Layout l{c.f, c.s.N, c.s.K};
    EXPECT_EQ(cost.bytes.weights, matrix_bytes(c.f, c.s.N, c.s.K));
    EXPECT_EQ(cost.bytes.weights, l.total_bytes());
    EXPECT_EQ(cost.bytes.weights, WeightFormat::parse(to_string(c.f)).bytes(c.s.N, c.s.K));
    EXPECT_EQ(cost.bytes.activations, 2 * c.s.M * c.s.K);
    EXPECT_EQ(cost.bytes.writes, 2 * c.s.M * c.s.N);
    EXPECT_EQ(cost.bytes.kv_cache, 0u);
    EXPECT_EQ(r.footprint_bytes(), cost.bytes.total());
  }
  // The layout's parts: 4 bits a weight, a byte a block, nvfp4's fp32 tensor scale.
  const Fp4Layout nv{DType::nvfp4, 4096, 4096}, mx{DType::mxfp4, 4096, 4096};
  EXPECT_EQ(nv.value_bytes(), 4096u * 2048);
  EXPECT_EQ(nv.scale_bytes(), 4096u * 256);
  EXPECT_EQ(nv.tensor_scale_bytes(), 4u);
  EXPECT_EQ(mx.scale_bytes(), 4096u * 128);
  EXPECT_EQ(mx.tensor_scale_bytes(), 0u);
  // Weight-only: the roofline is bf16's, not an FP4 ceiling.
  EXPECT_EQ(fp4_weight_format(DType::mxfp4).compute, DType::bf16);
  EXPECT_EQ(fp4_weight_format(DType::nvfp4).compute, DType::bf16);
}

TEST(LinearFp4, RequestBuilderAndItsRefusals) {
  const auto r = linear_fp4_request({4, 64, 96}, DType::nvfp4, Impl::own, 11);
  EXPECT_EQ(r.kind, "linear_fp4");
  EXPECT_EQ(r.dtype, DType::bf16);  // the activations
  EXPECT_EQ(r.phase, Phase::decode);
  EXPECT_EQ(r.seed, 11u);
  EXPECT_EQ(r.options.as<LinearFp4Options>().format, DType::nvfp4);
  EXPECT_EQ(LinearShape::of(r.shape).K, 96u);
  EXPECT_EQ(parse_fp4_format("mxfp4"), DType::mxfp4);
  EXPECT_EQ(parse_fp4_format("nvfp4"), DType::nvfp4);
  // K must be whole blocks: 48 is three nvfp4 blocks but one and a half mxfp4 ones.
  EXPECT_NO_THROW(linear_fp4_request({1, 64, 48}, DType::nvfp4, Impl::own));
  try {
    linear_fp4_request({1, 64, 48}, DType::mxfp4, Impl::own);
    ADD_FAILURE() << "K = 48 accepted for mxfp4";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("blocks of 32 weights along K, which must divide K = 48"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(linear_fp4_request({1, 64, 40}, DType::nvfp4, Impl::own), InputError);
  EXPECT_THROW(linear_fp4_request({1, 64, 64}, DType::bf16, Impl::own), InputError);
  EXPECT_THROW(parse_fp4_format("fp4"), InputError);
  EXPECT_THROW(parse_fp4_format("MXFP4"), InputError);
}

TEST(LinearFp4, ReferenceDequantisesExactly) {
  // One mxfp4 block: byte 0 holds weight 0 (low nibble 0xA: -1.0) and weight 1
  // (high nibble 0x9: -0.5); byte 1 weights 2 (0x7: 6) and 3 (0x1: 0.5); scale 2^-1.
  std::vector<std::uint8_t> v(16, 0), s{126};
  v[0] = 0x9A;
  v[1] = 0x17;
  const Fp4Layout mx{DType::mxfp4, 1, 32};
  auto w = reference::fp4_weight_row(mx, v.data(), s.data(), 0);
  EXPECT_EQ(w[0], -0.5f);
  EXPECT_EQ(w[1], -0.25f);
  EXPECT_EQ(w[2], 3.0f);
  EXPECT_EQ(w[3], 0.25f);
  EXPECT_EQ(w[31], 0.0f);
  // nvfp4: two blocks of 16, e4m3 scales 0.5 (0x30) and 0.375 (0x2C).
  std::vector<std::uint8_t> v2(8, 0), s2{0x30, 0x2C};
  v2[0] = 0x7F;  // weight 0: 0xF = -6, weight 1: 0x7 = 6
  v2[7] = 0xD5;  // weight 14: 0x5 = 3, weight 15: 0xD = -3
  v2[4] = 0x03;  // weight 8: 1.5
  const Fp4Layout nv{DType::nvfp4, 1, 32};
  std::vector<std::uint8_t> v3(16, 0);
  std::copy(v2.begin(), v2.end(), v3.begin());
  v3[8] = 0x60;  // weight 17: 0x6 = 4, in the second block
  w = reference::fp4_weight_row(nv, v3.data(), s2.data(), 0);
  EXPECT_EQ(w[0], -3.0f);
  EXPECT_EQ(w[1], 3.0f);
  EXPECT_EQ(w[8], 0.75f);
  EXPECT_EQ(w[14], 1.5f);
  EXPECT_EQ(w[15], -1.5f);
  EXPECT_EQ(w[17], 1.5f);
  // The check: X = ones, so y = tensor scale * sum(w), within the bf16 tolerance of
  // 8e-3 * sum |x*w| (about 0.03 here); an output 0.1 off is caught.
  const std::vector<float> x(32, 1.0f);
  double sum = 0;
  for (float f : w) sum += f;
  const float ts = 0.3f;
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> at{{0, 0}};
  EXPECT_NO_THROW(reference::check_fp4_linear(
      at, x.data(), nv, v3.data(), s2.data(), ts, [&](auto, auto) { return static_cast<float>(ts * sum); }, "nv"));
  EXPECT_THROW(reference::check_fp4_linear(at, x.data(), nv, v3.data(), s2.data(), ts,
                                           [&](auto, auto) { return static_cast<float>(ts * sum + 0.1); }, "nv"),
               VerificationError);
}

TEST(LinearFp4, FillIsSeededWithScalesInASmallRangeAndExactProducts) {
  for (DType f : {DType::mxfp4, DType::nvfp4}) {
    SCOPED_TRACE(to_string(f));
    const Fp4Layout l{f, 37, 256};
    std::vector<std::uint8_t> v(l.value_bytes()), s(l.scale_bytes()), v2(v.size()), s2(s.size()), v3(v.size()),
        s3(s.size());
    float ts = 0, ts2 = 0, ts3 = 0;
    reference::fill_fp4(l, v.data(), s.data(), &ts, 7);
    reference::fill_fp4(l, v2.data(), s2.data(), &ts2, 7);
    reference::fill_fp4(l, v3.data(), s3.data(), &ts3, 8);
    EXPECT_EQ(v, v2);
    EXPECT_EQ(s, s2);
    EXPECT_EQ(ts, ts2);
    EXPECT_NE(v, v3);
    std::set<unsigned> codes;
    for (std::uint64_t i = 0; i < l.N * l.K; ++i) codes.insert(numeric::nibble(v.data(), i));
    EXPECT_EQ(codes.size(), 16u);  // every e2m1 code, both zeros included
    for (auto c : s) {
      const float sc = f == DType::nvfp4 ? numeric::fp8e4m3_to_float(c) : numeric::e8m0_to_float(c);
      EXPECT_GE(sc, 0.0625f);
      EXPECT_LE(sc, 0.5f);
    }
    if (f == DType::nvfp4) {
      // A tensor scale a quantiser would make: not 1, not a power of two.
      EXPECT_GE(ts, 0.25f);
      EXPECT_LT(ts, 0.75f);
      int e = 0;
      EXPECT_NE(std::frexp(ts, &e), 0.5f);
      EXPECT_NE(ts, ts3);
    } else {
      EXPECT_EQ(ts, 1.0f);
    }
    // Every weight is e2m1 * block scale exactly.
    for (std::uint64_t n : {0u, 36u}) {
      const auto w = reference::fp4_weight_row(l, v.data(), s.data(), n);
      for (std::uint64_t k = 0; k < l.K; ++k) {
        const std::uint8_t c = s[n * (l.K / l.block()) + k / l.block()];
        const double sc = f == DType::nvfp4 ? numeric::fp8e4m3_to_float(c) : numeric::e8m0_to_float(c);
        EXPECT_EQ(static_cast<double>(w[k]), numeric::fp4e2m1_to_float(numeric::nibble(v.data(), n * l.K + k)) * sc);
      }
    }
  }
}

TEST(LinearFp4, CpuKernelMatchesReferenceAtEveryBatch) {
  // N odd; K of a few blocks, and K past the kernel's 1024-weight chunk by one
  // block (mxfp4 1056) or an odd number of nvfp4 blocks (48, 1040).
  auto b = make_cpu_backend();
  struct Case {
    DType f;
    std::uint64_t K;
  };
  for (const Case c : {Case{DType::mxfp4, 96}, Case{DType::mxfp4, 1056}, Case{DType::nvfp4, 48}, Case{DType::nvfp4, 1040}})
    for (std::uint64_t M = 1; M <= 16; ++M) {
      auto op = b->prepare(linear_fp4_request({M, 67, c.K}, c.f, Impl::own, 3 + M));
      EXPECT_NO_THROW(op->verify()) << to_string(c.f) << " K=" << c.K << " M=" << M;
    }
  const auto why = b->cannot_run(linear_fp4_request({17, 64, 128}, DType::nvfp4, Impl::own));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("batch 1 to 16"), std::string::npos) << *why;
}

// The point names a --benchmark_list_tests run printed, in order.
std::vector<std::string> points(const std::string& out) {
  std::vector<std::string> v;
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);)
    if (line.find("/manual_time") != std::string::npos) v.push_back(line);
  return v;
}

TEST(LinearFp4Cli, TheGroupRunsEachProjectionInBothFormatsBesideTheBf16Rows) {
  const std::string base = "run --backend=cpu --benchmark_list_tests --dtype bf16 --model gpt-oss-20b ";
  const auto both = test::run_cli(base + "--ops linear_fp4,decode_linear --axis linear_fp4.batch=1,16");
  ASSERT_EQ(both.status, 0) << both.out;
  std::size_t mx = 0, nv = 0, bf16 = 0;
  std::set<std::string> targets_fp4, targets_bf16;
  // decode/<op>/gpt-oss-20b.<target>/bf16/...
  auto target = [](const std::string& p) {
    const auto dot = p.find('.');
    return p.substr(dot + 1, p.find('/', dot) - dot - 1);
  };
  for (const auto& p : points(both.out)) {
    if (p.rfind("decode/linear_fp4/gpt-oss-20b.", 0) == 0) {
      EXPECT_TRUE(p.find("/bf16/batch:1/") != std::string::npos || p.find("/bf16/batch:16/") != std::string::npos) << p;
      mx += p.find("/format:mxfp4/impl:own") != std::string::npos;
      nv += p.find("/format:nvfp4/impl:own") != std::string::npos;
      targets_fp4.insert(target(p));
    } else if (p.rfind("decode/linear/gpt-oss-20b.", 0) == 0) {
      EXPECT_NE(p.find("/bf16/"), std::string::npos) << p;
      ++bf16;
      targets_bf16.insert(target(p));
    }
  }
  EXPECT_GT(mx, 0u) << both.out;
  EXPECT_EQ(mx, nv);
  EXPECT_GT(bf16, 0u);
  EXPECT_EQ(targets_fp4, targets_bf16);  // every projection of decode_linear (gpt-oss: K = 2880, 4096, whole blocks)
  // One format alone.
  const auto one = test::run_cli(base + "--ops linear_fp4 --axis linear_fp4.format=nvfp4 --axis linear_fp4.batch=4");
  ASSERT_EQ(one.status, 0) << one.out;
  ASSERT_FALSE(points(one.out).empty());
  for (const auto& p : points(one.out)) EXPECT_NE(p.find("/bf16/batch:4/format:nvfp4/impl:own"), std::string::npos) << p;
}

TEST(LinearFp4Cli, ABadFormatIsOneLineAndStatusTwo) {
  const auto out = test::cli_tmp("fp4-bad-format.json");
  const std::string run = "run --backend=cpu --no-calibrate --no-summary --model " + kTiny + " --out " + out +
                          " --ops linear_fp4 --axis linear_fp4.format=";
  for (const auto& [word, expect] : std::vector<std::pair<std::string, std::string>>{
           {"fp8", "--axis linear_fp4.format: unknown FP4 weight format 'fp8': use mxfp4 or nvfp4"},
           {"mxfp4,nvfp", "unknown FP4 weight format 'nvfp'"},
           {"mxfp4,", "--axis linear_fp4.format: an empty item"}}) {
    const auto r = test::run_cli(run + word);
    EXPECT_EQ(r.status, 2) << word << "\n" << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << word << "\n" << r.out;
    const auto lines = std::count(r.out.begin(), r.out.end(), '\n');
    EXPECT_EQ(lines - (r.out.rfind("phasebench: backend ", 0) == 0 ? 1 : 0), 1) << word << "\n" << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace phasebench
