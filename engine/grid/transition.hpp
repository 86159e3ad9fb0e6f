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

#include "grid/schedule.hpp"

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

// One subject's transition as a kernels/grid.hpp view (stride 1; valid while `tr` is unchanged).
template <int N>
TransitionView view_of(const Transition<N>& tr) noexcept {
  static_assert(sizeof(Mat<N>) == sizeof(double) * N * N, "partial matrices lie back to back");
  TransitionView v;
  v.k = tr.k.data();
  v.g = tr.g.data();
  v.partial = tr.partial.empty() ? nullptr : tr.partial.front().data();
  v.stride = 1;
  v.matrix_step = N * N;
  return v;
}

// Inputs of breakpoint `k` for one subject, rounded to Real (kernels/grid.hpp's breakpoint_inputs,
// the function every compute path, host or device, gets its inputs from).
template <int N, class Real>
inline void breakpoint_inputs(const Schedule& s, const Transition<N>& tr, std::int64_t k, Real* c,
                              Real* f) {
  breakpoint_inputs<N, Real>(s.view(), view_of(tr), k, c, f);
}

// Inputs of every breakpoint (breakpoints * N values in each of c and f).
template <int N, class Real>
void subject_inputs(const Schedule& s, const Transition<N>& tr, Real* c, Real* f) {
  const ScheduleView sv = s.view();
  const TransitionView tv = view_of(tr);
  for (std::int64_t k = 0; k < s.breakpoints(); ++k)
    breakpoint_inputs<N, Real>(sv, tv, k, c + k * N, f + k * N);
}

}  // namespace pkscan::detail
