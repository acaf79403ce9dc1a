// The inline PTX the emulation takes for FlashInfer's headers (kernels/cuda_emu/
// pb_emu_ptx.hpp, ptx.cpp), one instruction at a time, against the PTX ISA: the .approx
// math within the error the ISA states and with its special values, shfl.sync.bfly's
// clamp and segment rule, %laneid, the cache-operator and memory-order loads and stores,
// prefetch and griddepcontrol (no effect), mma.sync m16n8k16 with an fp16 accumulator,
// the row-sum mma with sink and literal operands, ldmatrix's other qualifier order and
// its sink operands, and cp.async.cg .L2::128B with its cp-size literal, zero fill and
// the predicated form. Expected values are computed here from the ISA's definitions,
// independently of the emulation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "emu_ptx_forms_kernels.hpp"
#include "emu_test_util.hpp"

namespace {

using pb_emu_test::Dev;
using EmuPtx = pb_emu_test::EmuStreamTest;
namespace num = phasebench::numeric;

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

float bits_to_float(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

std::vector<float> run_f32(int op, const std::vector<float>& in, cudaStream_t s) {
  Dev<float> din(in.size()), dout(in.size());
  din.set(in);
  pb_emu_test::approx_f32(op, din.p, dout.p, static_cast<int>(in.size()), s);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  return dout.get();
}

// Normal inputs over the range where each function's result is a normal float.
std::vector<float> spread(float lo, float hi, int n) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n - 1));
  return v;
}

// Same class and sign for the special values (NaN, infinities, zeros).
void expect_special(float got, float want, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": " << got;
  } else {
    EXPECT_EQ(got, want) << what;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << what << " (sign)";
  }
}

const float kSub = bits_to_float(0x00400000u);  // a subnormal (2^-127), flushed by .ftz

// ex2.approx.ftz.f32: "maximum relative error 2 ulp" over the full range; -Inf -> +0,
// +-0 -> 1, +Inf -> +Inf, NaN -> NaN; .ftz flushes subnormal inputs and results.
TEST_F(EmuPtx, Ex2ApproxFtzF32) {
  std::vector<float> in = spread(-125.f, 127.f, 301);
  const auto r = run_f32(0, in, s_);
  for (std::size_t i = 0; i < in.size(); ++i) {
    const double want = std::exp2(static_cast<double>(in[i]));
    EXPECT_LE(std::fabs(r[i] - want), 2 * std::ldexp(want, -23)) << "ex2(" << in[i] << ")";
  }
  const std::vector<float> sp = {-kInf, -0.f, 0.f, kInf, kNaN, kSub, -kSub, -130.f};
  const std::vector<float> want = {0.f, 1.f, 1.f, kInf, kNaN, 1.f, 1.f, 0.f};  // 2^-130 is subnormal: flushed
  const auto rs = run_f32(0, sp, s_);
  for (std::size_t i = 0; i < sp.size(); ++i) expect_special(rs[i], want[i], "ex2(" + std::to_string(sp[i]) + ")");
}

// lg2.approx.ftz.f32: maximum absolute error 2^-22 for inputs in [0.5, 2], relative
// error 2^-22 elsewhere (ISA); -Inf and negative -> NaN, +-0 and subnormals (.ftz) ->
// -Inf, +Inf -> +Inf.
TEST_F(EmuPtx, Lg2ApproxFtzF32) {
  std::vector<float> in = spread(0.5f, 2.f, 101);
  for (float e : {-120.f, -30.f, -1.5f, 3.f, 40.f, 126.f}) in.push_back(std::exp2(e) * 1.37f);
  const auto r = run_f32(1, in, s_);
  for (std::size_t i = 0; i < in.size(); ++i) {
    const double want = std::log2(static_cast<double>(in[i]));
    const double bound = (in[i] >= 0.5f && in[i] <= 2.f) ? std::ldexp(1.0, -22) : std::ldexp(std::fabs(want), -22);
    EXPECT_LE(std::fabs(r[i] - want), bound) << "lg2(" << in[i] << ")";
  }
  const std::vector<float> sp = {-kInf, -3.f, -0.f, 0.f, kSub, -kSub, kInf, kNaN};
  const std::vector<float> want = {kNaN, kNaN, -kInf, -kInf, -kInf, -kInf, kInf, kNaN};
  const auto rs = run_f32(1, sp, s_);
  for (std::size_t i = 0; i < sp.size(); ++i) expect_special(rs[i], want[i], "lg2(" + std::to_string(sp[i]) + ")");
}

// rcp.approx.ftz.f32: "maximum ulp error is 1" over the full range; +-0 -> +-Inf,
// +-Inf -> +-0; .ftz: subnormal inputs give +-Inf, subnormal results +-0.
TEST_F(EmuPtx, RcpApproxFtzF32) {
  std::vector<float> in = spread(-1000.f, 1000.f, 200);
  for (float e : {-120.f, -20.f, 20.f, 120.f}) in.push_back(std::exp2(e) * 1.61f);
  const auto r = run_f32(2, in, s_);
  for (std::size_t i = 0; i < in.size(); ++i) {
    const double want = 1.0 / static_cast<double>(in[i]);
    EXPECT_LE(std::fabs(r[i] - want), std::ldexp(std::fabs(want), -23)) << "rcp(" << in[i] << ")";
  }
  const std::vector<float> sp = {-kInf, -0.f, 0.f, kInf, kNaN, kSub, -kSub, std::exp2(127.f)};
  const std::vector<float> want = {-0.f, -kInf, kInf, 0.f, kNaN, kInf, -kInf, 0.f};
  const auto rs = run_f32(2, sp, s_);
  for (std::size_t i = 0; i < sp.size(); ++i) expect_special(rs[i], want[i], "rcp(" + std::to_string(sp[i]) + ")");
}

// rsqrt.approx.ftz.f32: maximum relative error 2^-22.9 over the full range; negative
// and -Inf -> NaN, -0 -> -Inf, +0 -> +Inf, +Inf -> +0.
TEST_F(EmuPtx, RsqrtApproxFtzF32) {
  std::vector<float> in = spread(1e-3f, 1e4f, 200);
  for (float e : {-120.f, -40.f, 40.f, 126.f}) in.push_back(std::exp2(e) * 1.29f);
  const auto r = run_f32(3, in, s_);
  for (std::size_t i = 0; i < in.size(); ++i) {
    const double want = 1.0 / std::sqrt(static_cast<double>(in[i]));
    EXPECT_LE(std::fabs(r[i] - want), std::ldexp(want, -22) * std::exp2(-0.9)) << "rsqrt(" << in[i] << ")";
  }
  const std::vector<float> sp = {-kInf, -4.f, -0.f, 0.f, kInf, kNaN, kSub};
  const std::vector<float> want = {kNaN, kNaN, -kInf, kInf, 0.f, kNaN, kInf};
  const auto rs = run_f32(3, sp, s_);
  for (std::size_t i = 0; i < sp.size(); ++i) expect_special(rs[i], want[i], "rsqrt(" + std::to_string(sp[i]) + ")");
}

// tanh.approx.f32: maximum relative error 2^-10.987 (ISA); +-0 -> +-0, +-Inf -> +-1.
TEST_F(EmuPtx, TanhApproxF32) {
  std::vector<float> in = spread(-9.f, 9.f, 181);
  in.push_back(1e-20f);
  const auto r = run_f32(4, in, s_);
  for (std::size_t i = 0; i < in.size(); ++i) {
    const double want = std::tanh(static_cast<double>(in[i]));
    EXPECT_LE(std::fabs(r[i] - want), std::fabs(want) * std::exp2(-10.987)) << "tanh(" << in[i] << ")";
  }
  const std::vector<float> sp = {-kInf, -0.f, 0.f, kInf, kNaN};
  const std::vector<float> want = {-1.f, -0.f, 0.f, 1.f, kNaN};
  const auto rs = run_f32(4, sp, s_);
  for (std::size_t i = 0; i < sp.size(); ++i) expect_special(rs[i], want[i], "tanh(" + std::to_string(sp[i]) + ")");
}

// ex2.approx.f16 / .f16x2: maximum relative error 2^-9.9; tanh.approx.f16 / .f16x2:
// maximum absolute error 2^-10.987 (ISA). The x2 forms apply the operation to each
// half of the register, the element of lower index in the low half.
TEST_F(EmuPtx, Ex2AndTanhApproxF16AndF16x2) {
  std::vector<std::uint16_t> in;
  for (float x = -14.f; x <= 15.f; x += 0.125f) in.push_back(num::float_to_fp16(x));
  if (in.size() % 2) in.push_back(num::float_to_fp16(0.5f));
  Dev<std::uint16_t> din(in.size()), dout(in.size());
  din.set(in);
  for (int op = 0; op < 4; ++op) {
    pb_emu_test::approx_f16(op, din.p, dout.p, static_cast<int>(in.size()), s_);
    ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    const auto r = dout.get();
    const bool ex2 = op % 2 == 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const double x = num::fp16_to_float(in[i]);
      const double got = num::fp16_to_float(r[i]);
      if (ex2) {
        const double want = std::exp2(x);
        EXPECT_LE(std::fabs(got - want), want * std::exp2(-9.9)) << "op " << op << " ex2(" << x << ")";
      } else {
        EXPECT_LE(std::fabs(got - std::tanh(x)), std::exp2(-10.987)) << "op " << op << " tanh(" << x << ")";
      }
    }
  }
}

// shfl.sync.bfly.b32 d, a, b, c, membermask (ISA): lane j = lane ^ b[4:0], read when
// j <= maxLane = (lane & segmask) | (c[4:0] & ~segmask), segmask = c[12:8], else the
// lane's own value. CUDA's width w is c = ((32 - w) << 8) | 0x1f.
TEST_F(EmuPtx, ShflSyncBflyFollowsTheIsaClampRule) {
  Dev<float> out(64);
  for (unsigned width : {32u, 16u, 8u, 4u, 2u, 1u})
    for (unsigned b : {1u, 2u, 5u, 8u, 16u, 31u}) {
      const unsigned c = ((32u - width) << 8) | 0x1fu;
      pb_emu_test::shfl_bfly(b, c, out.p, s_);
      ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess) << "width " << width << " b " << b;
      const auto r = out.get();
      const unsigned segmask = c >> 8 & 0x1fu;
      for (unsigned lane = 0; lane < 32; ++lane) {
        const unsigned max_lane = (lane & segmask) | (0x1fu & ~segmask);
        unsigned j = lane ^ b;
        if (j > max_lane) j = lane;
        EXPECT_EQ(r[lane], 100.f + static_cast<float>(j)) << "width " << width << " b " << b << " lane " << lane;
        EXPECT_EQ(r[32 + lane], 100.f + static_cast<float>(j)) << "(.b32 register) width " << width << " b " << b;
      }
    }
  // A clamp other than 0x1f, or a segment mask that is not 32 - a power of two: refused.
  pb_emu_test::shfl_bfly(1, 0x0fu, out.p, s_);
  expect_launch_failure("shfl.sync.bfly.b32: operand c");
  pb_emu::reset_after_failure_for_tests();
  pb_emu_test::shfl_bfly(1, (8u << 8) | 0x1fu, out.p, s_);
  expect_launch_failure("shfl.sync.bfly.b32: operand c");
}

// mov.u32 %laneid: the thread's lane in its warp.
TEST_F(EmuPtx, MovLaneid) {
  Dev<unsigned> out(96);
  pb_emu_test::laneid(out.p, 96, s_);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  const auto r = out.get();
  for (unsigned t = 0; t < 96; ++t) EXPECT_EQ(r[t], t % 32) << t;
}

// ld/st.global with .cs (a cache hint), .acquire/.release at .sys scope and .volatile:
// the same values as plain accesses (one thread at a time is sequentially consistent),
// the hardware's alignment rule (a .vN.b32 access aligned to its size); prefetch.global.L2
// has no result and no fault for any address; griddepcontrol.wait/.launch_dependents
// have nothing to wait for or release in a stream that runs grids one after another.
TEST_F(EmuPtx, GlobalCacheOperatorAndMemoryOrderForms) {
  std::vector<unsigned> in(128);
  for (unsigned i = 0; i < 128; ++i) in[i] = 0x9e3779b9u * (i + 1);
  Dev<unsigned> din(128), dout(128);
  din.set(in);
  const char* names[] = {"ld/st.global.cs.b32", "ld/st.global.cs.v2.b32", "ld.acquire/st.release.global.sys.v4.b32",
                         "ld/st.volatile.global.v4.b32"};
  for (int form = 0; form < 4; ++form) {
    dout.set(std::vector<unsigned>(128, 0));
    pb_emu_test::global_forms(form, din.p, dout.p, din.p + 4096, s_);  // the prefetch address: past the allocation
    ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess) << names[form];
    EXPECT_EQ(dout.get(), in) << names[form];
  }
  const char* misaligned[] = {"in ld.global.cs.b32", "in ld.global.cs.v2.b32", "in ld.acquire.global.sys.v4.b32",
                              "in ld.volatile.global.v4.b32"};
  for (int form = 0; form < 4; ++form) {
    pb_emu_test::global_forms_misaligned(form, din.p, dout.p, s_);
    expect_launch_failure(misaligned[form]);
    pb_emu::reset_after_failure_for_tests();
  }
}

// mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16: D = A * B + C with C and D fp16
// (.f16x2 registers, c0..c3 laid out as the fp32 form's); the sum rounded to fp16 once
// (the ISA leaves the internal precision open: an fp32 sum is within it).
TEST_F(EmuPtx, MmaM16n8k16Fp16Accumulator) {
  std::vector<std::uint16_t> A(256), B(128), C(128);
  std::vector<float> a(256), b(128), c(128);
  for (int i = 0; i < 256; ++i) a[i] = num::fp16_to_float(A[i] = num::float_to_fp16(num::random_value(11, i, 1.f)));
  for (int i = 0; i < 128; ++i) b[i] = num::fp16_to_float(B[i] = num::float_to_fp16(num::random_value(12, i, 1.f)));
  for (int i = 0; i < 128; ++i) c[i] = num::fp16_to_float(C[i] = num::float_to_fp16(num::random_value(13, i, 4.f)));
  Dev<std::uint16_t> dA(256), dB(128), dC(128), dD(128);
  dA.set(A);
  dB.set(B);
  dC.set(C);
  pb_emu_test::mma_f16_acc(dA.p, dB.p, dC.p, dD.p, s_);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  const auto D = dD.get();
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 8; ++col) {
      double want = c[r * 8 + col];
      for (int k = 0; k < 16; ++k) want += static_cast<double>(a[r * 16 + k]) * b[k * 8 + col];
      // fp16 has 11 significant bits: one rounding of the result, plus fp32 summation.
      EXPECT_NEAR(num::fp16_to_float(D[r * 8 + col]), want, std::fabs(want) * std::exp2(-11) + 1e-6)
          << "D[" << r << "][" << col << "]";
    }
}

// FlashInfer's row sum (mma.cuh m16k16_rowsum_f16f16f32): B all ones, destinations d1 and
// d3 the sink '_', C's c1 and c3 the literal 0.: lane (g, t) gets d0 = sum of row g of A
// + c0 and d2 = sum of row g + 8 + c2 (ISA: d0 is (row g, col 2t), d2 (row g + 8, col 2t)).
TEST_F(EmuPtx, MmaRowSumWithSinkAndLiteralOperands) {
  for (bool bf16 : {true, false}) {
    std::vector<std::uint16_t> A(256);
    std::vector<float> a(256), acc(64), row(16, 0.f);
    for (int i = 0; i < 256; ++i) {
      const float v = num::random_value(21, i, 1.f);
      A[i] = bf16 ? num::float_to_bf16(v) : num::float_to_fp16(v);
      a[i] = bf16 ? num::bf16_to_float(A[i]) : num::fp16_to_float(A[i]);
    }
    for (int i = 0; i < 64; ++i) acc[i] = num::random_value(22, i, 2.f);
    Dev<std::uint16_t> dA(256);
    Dev<float> dacc(64), dout(64);
    dA.set(A);
    dacc.set(acc);
    pb_emu_test::mma_rowsum(dA.p, bf16, dacc.p, dout.p, s_);
    ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    const auto out = dout.get();
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4;
      for (int h = 0; h < 2; ++h) {
        double want = acc[lane * 2 + h];
        for (int k = 0; k < 16; ++k) want += a[(g + 8 * h) * 16 + k];
        EXPECT_NEAR(out[lane * 2 + h], want, 1e-5) << (bf16 ? "bf16" : "fp16") << " lane " << lane << " d" << 2 * h;
      }
    }
  }
}

// ldmatrix (ISA fragment table, as test_emu_ldmatrix_cp_async.cpp): lane l holds row
// l / 4, elements 2 (l % 4) and + 1 of each matrix, .trans the transposed matrix. The
// grammar's other order (.trans before the shape) is the same instruction; a sink '_'
// destination drops that matrix's register and leaves the others in place.
TEST_F(EmuPtx, LdmatrixTransFirstSpellingAndSinkOperands) {
  std::vector<std::uint16_t> tile(256);
  for (int i = 0; i < 256; ++i) tile[i] = static_cast<std::uint16_t>(0x2000 + 3 * i);
  Dev<std::uint16_t> dt(256);
  dt.set(tile);
  Dev<unsigned> out(128);
  auto element = [&](int i, int r, int c) -> unsigned { return tile[((i % 2) * 8 + r) * 16 + (i / 2) * 8 + c]; };
  // form: .trans, and which registers it writes (the rest keep 0xdeadbeef).
  const struct {
    bool trans;
    unsigned written;
  } forms[] = {{true, 0xf}, {false, 0x5}, {false, 0xa}, {true, 0x3}, {true, 0xc}};
  for (int form = 0; form < 5; ++form) {
    pb_emu_test::ldmatrix_forms(dt.p, form, out.p, s_);
    ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess) << "form " << form;
    const auto r = out.get();
    for (int lane = 0; lane < 32; ++lane) {
      const int row = lane / 4, col = 2 * (lane % 4);
      for (int i = 0; i < 4; ++i) {
        unsigned want = 0xdeadbeefu;
        if (forms[form].written >> i & 1u)
          want = forms[form].trans ? element(i, col, row) | element(i, col + 1, row) << 16
                                   : element(i, row, col) | element(i, row, col + 1) << 16;
        EXPECT_EQ(r[lane * 4 + i], want) << "form " << form << " lane " << lane << " register " << i;
      }
    }
  }
}

// cp.async.cg.shared.global.L2::128B [dst], [src], 16{, src-size} (ISA): the L2 prefetch
// size is a hint; src-size bytes are copied and the rest of the 16 zero-filled (src-size
// 0: nothing is read, whatever the address); the predicated form copies only where the
// predicate holds. .cg takes cp-size 16 only.
TEST_F(EmuPtx, CpAsyncCgL2Prefetch128B) {
  std::vector<uint4> src(64);
  for (unsigned i = 0; i < 64; ++i) src[i] = make_uint4(i, ~i, 0x12345678u ^ i, i * 7u);
  Dev<uint4> dsrc(64), out(64);
  dsrc.set(src);
  pb_emu_test::cp_async_l2_128b(dsrc.p, dsrc.p + 1000, out.p, s_);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  const auto r = out.get();
  auto same = [](const uint4& x, const uint4& y) { return x.x == y.x && x.y == y.y && x.z == y.z && x.w == y.w; };
  const uint4 zero = make_uint4(0, 0, 0, 0), old = make_uint4(0xa5a5a5a5u, 0xa5a5a5a5u, 0xa5a5a5a5u, 0xa5a5a5a5u);
  for (int lane = 0; lane < 32; ++lane) {
    EXPECT_TRUE(same(r[lane], lane % 2 == 0 ? src[lane] : zero)) << "src-size " << (lane % 2 ? 0 : 16) << " lane " << lane;
    EXPECT_TRUE(same(r[32 + lane], lane % 3 != 0 ? src[32 + lane] : old)) << "predicated, lane " << lane;
  }
  pb_emu_test::cp_async_l2_128b_bad_size(dsrc.p, s_);
  expect_launch_failure(".cg takes cp-size 16 only, not 8");
}

}  // namespace
