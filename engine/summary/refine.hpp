#pragma once
// Exact percentiles at any size (TimeSummary::begin_pass / end_pass): the state of the passes
// that find each order statistic a percentile needs, after the sketch has located it.
//
// Values are compared by their ordered key: the bits of a finite double mapped so that the
// unsigned order of keys is the order of the values (-0 just below +0). After the first pass
// each needed order statistic x_k of a row (output time x compartment) lies in a known cell of
// the sketch (the bucket <= 0, the values below the window or one bucket of the window), a
// closed interval [a, b] of keys with a known count of values and of values ranked below it.
// Every further pass sees the same values again and, for each interval that holds a needed
// rank, either collects its values (then x_k is read from them sorted: exact) or, when the
// values to collect would exceed the summary's budget, counts them in 2^j equal sub-intervals
// of keys, which locates x_k in an interval 2^j times narrower for the next pass. An interval
// whose values are all equal (the smallest and largest key seen are the same) is resolved at
// once. A pass that does not see the counts of the pass before (different values were added)
// makes the summary keep its estimates.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/summary.hpp"

namespace pkscan::detail {

// The ordered key of a finite double, and back.
// Branch-free (it vectorises): every bit of a negative flipped, the sign bit of a positive set.
inline std::uint64_t ordered_key(double x) noexcept {
  const std::uint64_t b = hd_bits(x);
  const auto neg = static_cast<std::uint64_t>(static_cast<std::int64_t>(b) >> 63);
  return b ^ (neg | 0x8000000000000000ull);
}
inline double from_ordered_key(std::uint64_t o) noexcept {
  return hd_from_bits((o >> 63) ? (o & 0x7FFFFFFFFFFFFFFFull) : ~o);
}

// Type-7 interpolation between order statistics a = x_k and b = x_{k+1} at fraction g, in
// numpy's form (exact at both ends).
inline double lerp7(double a, double b, double g) noexcept {
  const double d = b - a;
  return g < 0.5 ? a + d * g : b - d * (1.0 - g);
}

// Rank positions of a percentile among n values: k = floor(h), g = h - k, h = (n - 1) p / 100.
inline void rank_of(std::int64_t n, double p, std::int64_t& k, double& g) noexcept {
  const double h = static_cast<double>(n - 1) * (p / 100.0);
  double fk = std::floor(h);
  if (fk > static_cast<double>(n - 1)) fk = static_cast<double>(n - 1);
  k = static_cast<std::int64_t>(fk);
  g = h - fk;
}

// One interval of keys of one row that holds needed order statistics.
struct RefineTarget {
  std::uint64_t a = 0, b = 0;  // keys, inclusive
  std::int64_t below = 0;      // values of the row ordered before a
  std::int64_t count = 0;      // values in [a, b]
  int shift = -1;              // -1: collect the values; else count key (o - a) >> shift
  std::int64_t seen = 0;       // values found in [a, b] in this pass
  std::uint64_t lo_seen = ~0ull, hi_seen = 0;
  std::vector<double> values;        // collected
  std::vector<std::uint32_t> hist;   // sub-interval counts
  std::vector<std::uint32_t> slots;  // the row's order-statistic slots that lie in it
};

struct Refinement {
  int slots_per_row = 0;           // 2 x percentiles: x_k and x_{k+1} of each
  std::vector<std::int64_t> rank;  // per slot: the rank k of the order statistic
  std::vector<double> stat;        // rows x slots_per_row: the resolved order statistics
  std::vector<std::vector<RefineTarget>> targets;  // per row, by increasing a
  // The targets of a pass in row order, flat for add(): target k of the pass is flat[k], with
  // keys [lo[k], lo[k] + width[k]]; row r's targets are k in [row_first[r], row_first[r + 1]).
  std::vector<RefineTarget*> flat;
  std::vector<std::uint64_t> lo, width;
  std::vector<std::uint32_t> row_first;
  // The bounds' upper 32 bits again by slot, for testing a row's values at once (a value
  // whose key's upper half lies in a target's may lie in the target): slot j (< per_row) of
  // row r at j * rows + r, padded with [0, 0] (the upper half of no finite value's key).
  int per_row = 0;
  std::vector<std::uint32_t> lo_by_slot, width_by_slot;
  std::int64_t budget = 0;    // values that may be collected in one pass
  std::int64_t subjects = 0;  // passed to add() in this pass
  std::int64_t included = 0;  // of which included
  int passes = 0;             // passes begun
  bool active = false;        // between begin_pass() and end_pass()
  bool complete = false;      // every order statistic found: the percentiles are exact
  bool failed = false;        // a pass saw other values: the estimates stay
  std::int64_t open() const;  // targets left
};

// Chooses for every target whether it collects its values (the smallest counts first, while
// the values collected stay within `budget`) or counts them in sub-intervals; lays the targets
// out flat.
void plan_pass(Refinement& f);
// Lays the targets out flat as they are (their `shift` chosen) and clears what a pass finds:
// plan_pass's second half, and a pass planned by another process (RunExchange).
void lay_out_pass(Refinement& f);

// After a pass: resolves the targets whose values were collected or were all equal and
// narrows the others, rows on `threads` threads; false when a target saw another count than
// the pass before (the targets are then left as they are, partly closed).
bool close_pass(Refinement& f, int threads);

}  // namespace pkscan::detail
