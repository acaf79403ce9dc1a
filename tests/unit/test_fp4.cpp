// The block-scaled 4-bit types (nvfp4, mxfp4): their element codecs (e2m1 values,
// e8m0 scales), exact matrix sizes with scales, the weight formats, and the run's
// --dtype refusing them with where they are chosen instead.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "common/numeric.hpp"
#include "phasebench/dtype.hpp"
#include "phasebench/error.hpp"

namespace phasebench {
namespace {

TEST(Fp4, E2m1DecodesTheEightMagnitudesAndTheSign) {
  const float want[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (unsigned m = 0; m < 8; ++m) {
    EXPECT_EQ(numeric::fp4e2m1_to_float(m), want[m]) << m;
    EXPECT_EQ(numeric::fp4e2m1_to_float(m | 8u), -want[m]) << m;
    // Every code survives the round trip (the negative zero included, as a code).
    EXPECT_EQ(numeric::float_to_fp4e2m1(want[m]), m);
    EXPECT_EQ(numeric::float_to_fp4e2m1(-want[m]), m | 8u);
  }
}

TEST(Fp4, E2m1RoundsToNearestTiesToEvenAndSaturates) {
  EXPECT_EQ(numeric::float_to_fp4e2m1(0.25f), 0u);   // tie 0 / 0.5: even (0)
  EXPECT_EQ(numeric::float_to_fp4e2m1(0.26f), 1u);
  EXPECT_EQ(numeric::float_to_fp4e2m1(0.75f), 2u);   // tie 0.5 / 1: even (1.0, code 2)
  EXPECT_EQ(numeric::float_to_fp4e2m1(1.25f), 2u);   // tie 1 / 1.5: even (1.0)
  EXPECT_EQ(numeric::float_to_fp4e2m1(1.75f), 4u);   // tie 1.5 / 2: even (2.0)
  EXPECT_EQ(numeric::float_to_fp4e2m1(2.5f), 4u);    // tie 2 / 3: even (2.0)
  EXPECT_EQ(numeric::float_to_fp4e2m1(3.5f), 6u);    // tie 3 / 4: even (4.0)
  EXPECT_EQ(numeric::float_to_fp4e2m1(5.0f), 6u);    // tie 4 / 6: even (4.0)
  EXPECT_EQ(numeric::float_to_fp4e2m1(5.01f), 7u);
  EXPECT_EQ(numeric::float_to_fp4e2m1(1e9f), 7u);    // saturates at 6
  EXPECT_EQ(numeric::float_to_fp4e2m1(-1e9f), 15u);
  EXPECT_EQ(numeric::float_to_fp4e2m1(std::nanf("")), 0u);
}

TEST(Fp4, E8m0IsAPowerOfTwo) {
  EXPECT_EQ(numeric::e8m0_to_float(127), 1.0f);
  EXPECT_EQ(numeric::e8m0_to_float(128), 2.0f);
  EXPECT_EQ(numeric::e8m0_to_float(120), std::ldexp(1.0f, -7));
  EXPECT_EQ(numeric::e8m0_to_float(254), std::ldexp(1.0f, 127));
  EXPECT_EQ(numeric::e8m0_to_float(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(numeric::e8m0_to_float(255)));
}

TEST(Fp4, MatrixBytesCountValuesScalesAndTheTensorScale) {
  // nvfp4 4096 x 4096: 4 bits each, an e4m3 scale per 16, one fp32 tensor scale.
  EXPECT_EQ(matrix_bytes(DType::nvfp4, 4096, 4096), 4096ull * 4096 / 2 + 4096ull * 4096 / 16 + 4);
  // mxfp4: an e8m0 scale per 32, no tensor scale.
  EXPECT_EQ(matrix_bytes(DType::mxfp4, 4096, 4096), 4096ull * 4096 / 2 + 4096ull * 4096 / 32);
  // A partial block has a scale of its own; odd nibbles round up once.
  EXPECT_EQ(matrix_bytes(DType::mxfp4, 3, 33), (3ull * 33 * 4 + 3 * 2 * 8 + 7) / 8);
  EXPECT_EQ(matrix_bytes(DType::bf16, 3, 33), 3ull * 33 * 2);
  EXPECT_EQ(element_bits(DType::nvfp4), 4u);
  EXPECT_EQ(element_bits(DType::bf16), 16u);
  EXPECT_THROW(element_bytes(DType::nvfp4), std::logic_error);
  EXPECT_EQ(linear_output_type(DType::nvfp4), DType::bf16);
  EXPECT_EQ(linear_output_type(DType::mxfp4), DType::bf16);
}

TEST(Fp4, WeightFormatsMatchTheMatrixSizes) {
  const auto nv = WeightFormat::parse("nvfp4");
  EXPECT_EQ(nv.bytes(2880, 2880), matrix_bytes(DType::nvfp4, 2880, 2880));
  EXPECT_EQ(nv.compute, DType::nvfp4);
  const auto mx = WeightFormat::parse("mxfp4");
  EXPECT_EQ(mx.bytes(5760, 2880), matrix_bytes(DType::mxfp4, 5760, 2880));
  EXPECT_EQ(mx.compute, DType::mxfp4);
  // Both are block-scaled with the scales the OCP MX and NVFP4 formats define.
  EXPECT_EQ(block_scaling(DType::nvfp4)->block, 16u);
  EXPECT_STREQ(block_scaling(DType::nvfp4)->scale, "e4m3");
  EXPECT_EQ(block_scaling(DType::mxfp4)->block, 32u);
  EXPECT_STREQ(block_scaling(DType::mxfp4)->scale, "e8m0");
  EXPECT_FALSE(block_scaling(DType::fp8));
}

TEST(Fp4, TheRunsDtypeRefusesThemWithWhereTheyAreChosen) {
  EXPECT_EQ(parse_dtype("nvfp4"), DType::nvfp4);  // results files name it
  try {
    parse_run_dtype("nvfp4");
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--axis prefill_linear.dtype=nvfp4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_run_dtype("fp6"), InputError);
  EXPECT_EQ(parse_run_dtype("bf16"), DType::bf16);
}

}  // namespace
}  // namespace phasebench
