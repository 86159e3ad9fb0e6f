#pragma once
// Pieces of the exact event-list simulation (the event solver, engine/events/solver_impl.hpp, which
// serves simulate_dataset() and the Predictor): the per-parameter-set propagator K(d), G(d), the
// event record and its ordering, and the closed-form steady state.
//
// Numeric contract: between consecutive events the state moves by x <- K(d) x + G(d) r with
// K(d) = expm(A d), G(d) = integral_0^d expm(A u) du and r the summed rates of the running
// infusions. K and G come from an eigendecomposition of A, computed once per parameter set, when
// A has real eigenvalues, a well-conditioned eigenvector matrix (cond < 1e4: errors stay within
// a few hundred ulps) and no eigenvalue lost in the rounding of the others (Propagator::reset);
// otherwise from exact_transition (grid/transition.hpp: scaling and squaring, accurate at any
// stiffness). float64 throughout.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "grid/transition.hpp"
#include "kernels/event.hpp"
#include "kernels/event_step.hpp"
#include "kernels/steady_state.hpp"

namespace pkscan::detail {

// The eigendecomposition A = V diag(lambda) V^-1 of a rate matrix with real eigenvalues, by the
// blocks of its flows (closed forms for blocks of one or two compartments, Eigen's EigenSolver
// otherwise): false when the solver fails, an eigenvalue has an imaginary part above
// 1e-12 * scale, or V is singular. `mask` is A's reachability (Propagator's mask_: 1 where
// compartment i is reachable from j, the transitive closure of the flows). Defined in
// events/eigendecomposition_impl.hpp and instantiated for N = 1..6 in six files CMake generates
// (one size each): EigenSolver is by far the most expensive template of the library to compile
// (docs/performance.md, "Thresholds").
template <int N>
bool real_eigendecomposition(const Mat<N>& a, const Eigen::Matrix<double, N, N>& mask, double scale,
                             Eigen::Matrix<double, N, N>& v, Eigen::Matrix<double, N, N>& vinv,
                             Eigen::Matrix<double, N, 1>& lambda);

// K(d) and G(d) for one parameter set.
template <int N>
class Propagator {
 public:
  void reset(const Mat<N>& a) {
    a_ = a;
    cache_d_.clear();
    cache_k_.clear();
    cache_g_.clear();
    fast_used_ = 0;
    fast_next_ = 0;
    fast_ = false;
    // Structural zeros: expm(A d)[i][j] (and G) can be non-zero only where compartment i is
    // reachable from j through the flows of A (transitive closure). The eigendecomposition does
    // not keep those zeros exactly (an eigenvector entry of 1e-17 instead of 0 leaks amount into
    // a depot that should be decaying alone), so K and G are masked with this pattern.
    mask_.setZero();
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j) mask_(i, j) = (i == j || a_(i, j) != 0.0) ? 1.0 : 0.0;
    for (int via = 0; via < N; ++via)
      for (int i = 0; i < N; ++i)
        for (int j = 0; j < N; ++j)
          if (mask_(i, via) != 0.0 && mask_(via, j) != 0.0) mask_(i, j) = 1.0;
    const double scale = std::max(1.0, a_.cwiseAbs().maxCoeff());
    if (!real_eigendecomposition<N>(a_, mask_, scale, v_, vinv_, lambda_)) return;
    // 1-norm condition number of the eigenvector matrix.
    const double cond =
        v_.cwiseAbs().colwise().sum().maxCoeff() * vinv_.cwiseAbs().colwise().sum().maxCoeff();
    if (!(cond < 1e4)) return;
    // Eigenvalues from a backward-stable solver are off by about cond u ||A|| in absolute terms:
    // harmless next to the fast modes, fatal to a slow one when A mixes widely different rates
    // (a volume of 1e-16 next to a peripheral rate of 0.1 puts the slow eigenvalue below the
    // noise of the fast ones). The eigendecomposition serves only when every eigenvalue keeps
    // about 7 digits by that bound (at least 1e9 cond u ||A||, u = 2^-53), but for the zero
    // eigenvalues the structure of A fixes: one per trap, a set of compartments that nothing
    // leaves (no flow out of the set, no elimination), whose eigenvalue is exactly 0 and is set
    // so. The others take the scaling and squaring of exact_transition, accurate entrywise at
    // any stiffness.
    const double noise = cond * 0x1.0p-53 * a_.cwiseAbs().maxCoeff();
    Eigen::Matrix<double, N, 1> size = lambda_.cwiseAbs();
    for (int t = traps(); t > 0; --t) {
      int i = 0;
      size.minCoeff(&i);
      if (!(size(i) <= 1e3 * noise)) return;  // not the trap's zero: trust none
      lambda_(i) = 0.0;
      size(i) = std::numeric_limits<double>::infinity();
    }
    if (!(size.minCoeff() >= 1e9 * noise)) return;
    // Reconstruction check: A = V diag(lambda) V^-1 to near rounding.
    const Eigen::Matrix<double, N, N> back = v_ * lambda_.asDiagonal() * vinv_;
    if ((back - a_).cwiseAbs().maxCoeff() > 1e-12 * scale) return;
    fast_ = true;
  }

  void step(double d, Mat<N>& k, Mat<N>& g) {
    Vec<N> e, s;
    step(d, k, g, e, s);
  }

  // step(d, k, g) that also returns the eigenvalue terms e, s of eigen_terms() (only when
  // fast() and d != 0; untouched otherwise).
  void step(double d, Mat<N>& k, Mat<N>& g, Vec<N>& e, Vec<N>& s) {
    if (d == 0.0) {
      k.setIdentity();
      g.setZero();
      return;
    }
    if (fast_) {
      // The last few interval lengths' terms are kept: a design's intervals repeat (doses and
      // samples on a schedule), and a kept K is the same bits as a recomputed one.
      if (const int i = kept_fast(d); i >= 0) {
        k = fast_k_[i];
        g = fast_g_[i];
        e = fast_e_[i];
        s = fast_s_[i];
        return;
      }
      eigen_terms(d, e, s);
      eigen_matrix_hd<N>(v_.data(), vinv_.data(), mask_.data(), e.data(), k.data());
      eigen_matrix_hd<N>(v_.data(), vinv_.data(), mask_.data(), s.data(), g.data());
      const int at = fast_used_ < kFastCache ? fast_used_++ : (fast_next_++ % kFastCache);
      fast_d_[at] = d;
      fast_k_[at] = k;
      fast_g_[at] = g;
      fast_e_[at] = e;
      fast_s_[at] = s;
      return;
    }
    if (const int i = kept_exact(d); i >= 0) {
      k = cache_k_[static_cast<std::size_t>(i)];
      g = cache_g_[static_cast<std::size_t>(i)];
      return;
    }
    exact_transition<N>(a_, d, k, g);
    if (cache_d_.size() < 64) {
      cache_d_.push_back(d);
      cache_k_.push_back(k);
      cache_g_.push_back(g);
    }
  }

  // K(d) of step(d, k, g) (d != 0) where G is not needed: a kept K in place, else step()'s
  // (into k and g).
  const Mat<N>& transition(double d, Mat<N>& k, Mat<N>& g) {
    const int i = fast_ ? kept_fast(d) : kept_exact(d);
    if (i >= 0) return fast_ ? fast_k_[i] : cache_k_[static_cast<std::size_t>(i)];
    step(d, k, g);
    return k;
  }

  // The eigenvalue terms of step(d) (only when fast()): e_i = exp(lambda_i d) and
  // s_i = (exp(lambda_i d) - 1) / lambda_i (d when lambda_i = 0), so that K = V diag(e) V^-1
  // and G = V diag(s) V^-1 before masking.
  void eigen_terms(double d, Vec<N>& e, Vec<N>& s) const {
    eigen_terms_hd<N>(lambda_.data(), d, e.data(), s.data());
  }

  const Mat<N>& a() const { return a_; }
  // Traps of A: closed classes of the flows (mask_, a transitive closure: every compartment
  // reachable from one reaches it back) without elimination (a column sum of 0 up to the
  // rounding of the diagonal, -(sum of the outflows)). A compartmental matrix has one zero
  // eigenvalue per trap.
  int traps() const {
    int count = 0;
    for (int j = 0; j < N; ++j) {
      bool first = true, closed = true, eliminates = false;
      for (int i = 0; i < N; ++i) {
        if (mask_(i, j) == 0.0) continue;                // i not reachable from j
        if (mask_(j, i) == 0.0) closed = false;          // i does not lead back: j's class is left
        if (mask_(j, i) != 0.0 && i < j) first = false;  // counted at its first member
        if (mask_(j, i) != 0.0) {
          double sum = 0.0;  // column i's sum: its elimination, negated
          for (int q = 0; q < N; ++q) sum += a_(q, i);
          eliminates = eliminates || sum < -4.0 * N * 0x1.0p-53 * std::fabs(a_(i, i));
        }
      }
      count += first && closed && !eliminates;
    }
    return count;
  }
  // True when K and G come from the eigendecomposition A = V diag(lambda) V^-1.
  bool fast() const { return fast_; }
  // The eigendecomposition (meaningful only when fast()).
  const Eigen::Matrix<double, N, N>& v() const { return v_; }
  const Eigen::Matrix<double, N, N>& vinv() const { return vinv_; }
  const Eigen::Matrix<double, N, 1>& lambda() const { return lambda_; }
  // The structural-zero mask of K and G (1 or 0), column-major.
  const Eigen::Matrix<double, N, N>& mask() const { return mask_; }

 private:
  // The slot of the kept terms of interval length d (fast path; exact path), or -1.
  int kept_fast(double d) const {
    for (int i = 0; i < fast_used_; ++i)
      if (fast_d_[i] == d) return i;
    return -1;
  }
  int kept_exact(double d) const {
    for (std::size_t i = 0; i < cache_d_.size(); ++i)
      if (cache_d_[i] == d) return static_cast<int>(i);
    return -1;
  }

  Mat<N> a_;
  bool fast_ = false;
  Eigen::Matrix<double, N, N> v_, vinv_, mask_;
  Eigen::Matrix<double, N, 1> lambda_;
  std::vector<double> cache_d_;
  std::vector<Mat<N>> cache_k_, cache_g_;
  // The fast path's kept steps (step()): K, G and the eigenvalue terms of up to kFastCache
  // interval lengths, the oldest replaced first once full.
  static constexpr int kFastCache = 8;
  int fast_used_ = 0;
  unsigned fast_next_ = 0;
  double fast_d_[kFastCache] = {};
  Mat<N> fast_k_[kFastCache], fast_g_[kFastCache];
  Vec<N> fast_e_[kFastCache], fast_s_[kFastCache];
};

// Propagator<N> through the raw arrays of kernels/steady_state.hpp.
template <int N>
struct PropagatorArrays {
  Propagator<N>& p;
  const double* a() const { return p.a().data(); }
  void step(double d, double* k, double* g, double* e, double* s) {
    Mat<N> km, gm;
    Vec<N> ev = Eigen::Map<const Vec<N>>(e), sv = Eigen::Map<const Vec<N>>(s);
    p.step(d, km, gm, ev, sv);
    std::copy(km.data(), km.data() + N * N, k);
    std::copy(gm.data(), gm.data() + N * N, g);
    std::copy(ev.data(), ev.data() + N, e);
    std::copy(sv.data(), sv.data() + N, s);
  }
};

// A std::vector of (rate, end time) as kernels/steady_state.hpp's list of running implied
// infusions.
struct RunsVector {
  std::vector<std::pair<double, double>>& v;
  int size() const { return static_cast<int>(v.size()); }
  double rate(int i) const { return v[static_cast<std::size_t>(i)].first; }
  double end(int i) const { return v[static_cast<std::size_t>(i)].second; }
  bool push(double rate, double end) {
    v.emplace_back(rate, end);
    return true;
  }
  void erase(int i) { v.erase(v.begin() + i); }
};

// record_steady_state_hd() (kernels/steady_state.hpp) with the CPU's propagator and a vector of
// runs.
template <int N, class Hooks>
Vec<N> record_steady_state(Propagator<N>& pr, const Event& d, double lag,
                           std::vector<std::pair<double, double>>& runs, Vec<N>& r_before,
                           Hooks& hooks) {
  PropagatorArrays<N> prop{pr};
  RunsVector list{runs};
  Vec<N> x;
  record_steady_state_hd<N>(prop, d, lag, list, r_before.data(), hooks, x.data());
  return x;
}

}  // namespace pkscan::detail
