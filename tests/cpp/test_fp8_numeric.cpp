// The CPU backend's fp8 e4m3 (fn) codec: exact decode of every code, round-to-nearest-even encode,
// saturation to +-448 and NaN kept.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu/numeric.hpp"

namespace {

using kvattn::cpu::double_to_fp8_e4m3;
using kvattn::cpu::fp8_e4m3_to_double;

TEST(Fp8Numeric, DecodeKnownCodes) {
  EXPECT_EQ(fp8_e4m3_to_double(0x00), 0.0);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_double(0x80)));
  EXPECT_EQ(fp8_e4m3_to_double(0x01), std::ldexp(1.0, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_double(0x08), std::ldexp(1.0, -6));  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_double(0x38), 1.0);
  EXPECT_EQ(fp8_e4m3_to_double(0x3c), 1.5);
  EXPECT_EQ(fp8_e4m3_to_double(0x7e), 448.0);
  EXPECT_EQ(fp8_e4m3_to_double(0xfe), -448.0);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_double(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_double(0xff)));
  EXPECT_EQ(fp8_e4m3_to_double(0x78), 256.0);  // exponent field 15 is a normal binade
}

TEST(Fp8Numeric, EveryCodeRoundTripsAndIsOrdered) {
  double previous = -1.0;
  for (int code = 0; code < 0x7f; ++code) {
    const double x = fp8_e4m3_to_double(uint8_t(code));
    EXPECT_GT(x, previous) << code;
    previous = x;
    EXPECT_EQ(double_to_fp8_e4m3(x), code) << x;
    EXPECT_EQ(double_to_fp8_e4m3(-x), code | 0x80) << -x;
  }
}

TEST(Fp8Numeric, RoundsToNearestTiesToEven) {
  for (int code = 0; code < 0x7e; ++code) {
    const double lo = fp8_e4m3_to_double(uint8_t(code)), hi = fp8_e4m3_to_double(uint8_t(code + 1));
    const double mid = (lo + hi) / 2;  // exact in double
    const int even = code % 2 == 0 ? code : code + 1;
    EXPECT_EQ(double_to_fp8_e4m3(mid), even) << mid;
    EXPECT_EQ(double_to_fp8_e4m3(std::nextafter(mid, lo)), code) << mid;
    EXPECT_EQ(double_to_fp8_e4m3(std::nextafter(mid, hi)), code + 1) << mid;
  }
  EXPECT_EQ(double_to_fp8_e4m3(std::ldexp(1.0, -11)), 0x00);  // a quarter of the smallest subnormal
  EXPECT_EQ(double_to_fp8_e4m3(1e-300), 0x00);
  EXPECT_EQ(double_to_fp8_e4m3(-1e-300), 0x80);
}

TEST(Fp8Numeric, SaturatesAndKeepsNaN) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double x : {448.0, 449.0, 464.0, 480.0, 1e6, inf}) {
    EXPECT_EQ(double_to_fp8_e4m3(x), 0x7e) << x;
    EXPECT_EQ(double_to_fp8_e4m3(-x), 0xfe) << -x;
  }
  EXPECT_EQ(double_to_fp8_e4m3(std::numeric_limits<double>::quiet_NaN()) & 0x7f, 0x7f);
}

}  // namespace
