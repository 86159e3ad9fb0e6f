#pragma once
// expect_close: relative error with an absolute floor near zero; NaN equals NaN; infinities
// must match. The failure message names the context (subject, time, compartment) and both values.
// same_bits: the same bits, value for value (NaN payloads and the sign of zero included).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace pkscan::test {

inline ::testing::AssertionResult close_to(double expected, double actual, double rtol,
                                           double atol) {
  if (std::isnan(expected) && std::isnan(actual)) return ::testing::AssertionSuccess();
  if (std::isinf(expected) || std::isinf(actual)) {
    if (expected == actual) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "expected " << expected << ", got " << actual;
  }
  const double err = std::fabs(expected - actual);
  const double tol = std::max(atol, rtol * std::fabs(expected));
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "expected " << ::testing::PrintToString(expected) << ", got "
         << ::testing::PrintToString(actual) << " (abs err " << err << ", rel err "
         << err / std::max(std::fabs(expected), 1e-300) << ", tol " << tol << ")";
}

inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

inline bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

}  // namespace pkscan::test

#define PKSCAN_EXPECT_CLOSE(expected, actual, rtol, atol, context) \
  EXPECT_TRUE(::pkscan::test::close_to((expected), (actual), (rtol), (atol))) << context
