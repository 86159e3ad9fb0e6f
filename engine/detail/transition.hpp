#pragma once
// Per-subject transition matrices, built in double from the rate matrix A.
//
// exact: K = expm(A dt); G(h) = integral_0^h expm(A u) du, so a constant infusion rate vector r
//        over a full step adds G(dt) r. Both come from one exponential of the augmented matrix
//        [[A, I], [0, 0]] h = [[expm(A h), G(h)], [0, I]]. A partial step covering
//        [t_{i-1}, t_{i-1} + h) adds expm(A (dt - h)) G(h) r at t_i.
// euler: K = I + A dt; a full step adds r dt, a partial step r h (at the end of the step).
#include <Eigen/Core>
#include <cstdint>
#include <pkscan/types.hpp>
#include <vector>

#include "schedule.hpp"

namespace pkscan::detail {

template <int N>
using Mat = Eigen::Matrix<double, N, N, Eigen::RowMajor>;
template <int N>
using Vec = Eigen::Matrix<double, N, 1>;

template <int N>
struct Transition {
  Mat<N> k;
  Mat<N> g;                     // input matrix of a full step
  std::vector<Mat<N>> partial;  // per Schedule::partial_lengths: input matrix of a partial step
};

// expm(A h) and G(h) for one subject (exact discretization).
template <int N>
void exact_transition(const Mat<N>& a, double h, Mat<N>& k, Mat<N>& g);

// Fills `out` for one subject. `out` keeps its capacity across calls (no allocation in a loop).
template <int N>
void build_transition(const Mat<N>& a, double dt, Discretization disc,
                      const std::vector<double>& partial_lengths, Transition<N>& out);

// Inputs of breakpoint `k` for one subject, rounded to Real: c (every step of the breakpoint)
// and f (its first step: c plus boluses and partial infusions), N values each. Every compute
// path gets its inputs from here, so all paths add the same rounded numbers.
template <int N, class Real>
inline void breakpoint_inputs(const Schedule& s, const Transition<N>& tr, std::int64_t k, Real* c,
                              Real* f) {
  const std::size_t o = static_cast<std::size_t>(k * N);
  const Eigen::Map<const Vec<N>> rate(s.bp_rate.data() + o);
  Vec<N> cc = Vec<N>::Zero();
  if (!rate.isZero(0.0)) cc.noalias() = tr.g * rate;
  Vec<N> ff = cc + Eigen::Map<const Vec<N>>(s.bp_bolus.data() + o);
  for (std::int64_t p = s.bp_partial_begin[static_cast<std::size_t>(k)];
       p < s.bp_partial_begin[static_cast<std::size_t>(k + 1)]; ++p) {
    const PartialInfusion& pi = s.partials[static_cast<std::size_t>(p)];
    ff += tr.partial[static_cast<std::size_t>(pi.length_index)].col(pi.compartment) * pi.rate;
  }
  for (int r = 0; r < N; ++r) {
    c[r] = static_cast<Real>(cc(r));
    f[r] = static_cast<Real>(ff(r));
  }
}

// Inputs of every breakpoint (breakpoints * N values in each of c and f).
template <int N, class Real>
void subject_inputs(const Schedule& s, const Transition<N>& tr, Real* c, Real* f) {
  for (std::int64_t k = 0; k < s.breakpoints(); ++k)
    breakpoint_inputs<N, Real>(s, tr, k, c + k * N, f + k * N);
}

}  // namespace pkscan::detail
