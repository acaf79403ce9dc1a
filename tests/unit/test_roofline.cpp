// Roofline math: attainable rate and ridge, classification around the ridge,
// fraction of roofline, predicted time, and the choice of ceilings by source.
#include <gtest/gtest.h>

#include "phasebench/error.hpp"
#include "phasebench/roofline.hpp"

using namespace phasebench;

TEST(Roofline, AttainableAndRidge) {
  const double P = 1000e12, W = 4e12;  // ridge 250 FLOP/byte
  EXPECT_DOUBLE_EQ(attainable(1.0, P, W), 4e12);
  EXPECT_DOUBLE_EQ(attainable(250.0, P, W), P);
  EXPECT_DOUBLE_EQ(attainable(1e6, P, W), P);
}

TEST(Roofline, ClassificationAtAndAroundTheRidge) {
  const double ridge = 250.0;
  EXPECT_EQ(classify(249.999, ridge), Bound::memory);
  EXPECT_EQ(classify(250.0, ridge), Bound::compute);  // at the ridge: compute (I < ridge is memory)
  EXPECT_EQ(classify(250.001, ridge), Bound::compute);
  EXPECT_EQ(classify(0.0, ridge), Bound::memory);
}

TEST(Roofline, PlaceComputesFractionOfAttainable) {
  // 1e9 FLOPs over 1e8 bytes (I = 10) in 1 ms on P = 100 TF, W = 1 TB/s:
  // attainable = min(100e12, 10e12) = 10e12; achieved 1e12 -> 10%.
  const auto r = place(1e9, 1e8, 1e-3, 100e12, 1e12);
  EXPECT_DOUBLE_EQ(r.ridge, 100.0);
  EXPECT_EQ(r.bound, Bound::memory);
  EXPECT_DOUBLE_EQ(r.attainable_flops, 10e12);
  EXPECT_NEAR(r.fraction, 0.1, 1e-12);
  // Zero-FLOP op: fraction is achieved bandwidth over W.
  const auto m = place(0, 1e9, 1e-3, 100e12, 2e12);
  EXPECT_EQ(m.bound, Bound::memory);
  EXPECT_NEAR(m.fraction, 0.5, 1e-12);
}

TEST(Roofline, PredictedTimeIsTheSlowerLimit) {
  EXPECT_DOUBLE_EQ(roofline_time(1e12, 1e9, 1e12, 1e12), 1.0);     // compute: 1 s vs 1 ms
  EXPECT_DOUBLE_EQ(roofline_time(1e6, 4e12, 1e15, 2e12), 2.0);     // memory
}

TEST(Roofline, CeilingsPreferTheRequestedSourceAndFallBack) {
  Ceilings c;
  c.add_compute(DType::bf16, {989e12, CeilingSource::datasheet, "sheet"});
  c.add_bandwidth({4.8e12, CeilingSource::datasheet, "sheet"});
  EXPECT_EQ(c.compute_for(DType::bf16, CeilingSource::measured)->source, CeilingSource::datasheet);
  c.add_compute(DType::bf16, {790e12, CeilingSource::measured, "gemm"});
  c.add_bandwidth({4.1e12, CeilingSource::measured, "read"});
  EXPECT_EQ(c.compute_for(DType::bf16, CeilingSource::measured)->value, 790e12);
  EXPECT_EQ(c.compute_for(DType::bf16, CeilingSource::datasheet)->value, 989e12);
  EXPECT_EQ(c.bandwidth_for(CeilingSource::measured)->value, 4.1e12);
  EXPECT_FALSE(c.compute_for(DType::fp8, CeilingSource::measured).has_value());
  EXPECT_THROW(parse_ceiling_source("guess"), InputError);
}
