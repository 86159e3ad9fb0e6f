#pragma once
// Pieces of the exact event-list simulation (the event solver, engine/events/solver.cpp, which
// serves simulate_dataset() and the Predictor): the per-parameter-set propagator K(d), G(d), the
// event record and its ordering, and the closed-form steady state.
//
// Numeric contract: between consecutive events the state moves by x <- K(d) x + G(d) r with
// K(d) = expm(A d), G(d) = integral_0^d expm(A u) du and r the summed rates of the running
// infusions. K and G come from an eigendecomposition of A, computed once per parameter set, when
// A has real eigenvalues and a well-conditioned eigenvector matrix (cond < 1e4: errors stay within
// a few hundred ulps); otherwise from the exponential of [[A, I], [0, 0]] d (Eigen,
// scaling and squaring). float64 throughout.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "events/step_hd.hpp"
#include "grid/transition.hpp"

namespace pkscan::detail {

// The eigendecomposition A = V diag(lambda) V^-1 of a rate matrix with real eigenvalues: false
// when Eigen's EigenSolver fails, an eigenvalue has an imaginary part above 1e-12 * scale, or V
// is singular. Defined in core/eigendecomposition_impl.hpp and instantiated for N = 1..6 in six
// files CMake generates (one size each): EigenSolver is by
// far the most expensive template of the library to compile (over two minutes for the six
// sizes).
template <int N>
bool real_eigendecomposition(const Mat<N>& a, double scale, Eigen::Matrix<double, N, N>& v,
                             Eigen::Matrix<double, N, N>& vinv,
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
    if (!real_eigendecomposition<N>(a_, scale, v_, vinv_, lambda_)) return;
    // 1-norm condition number of the eigenvector matrix.
    const double cond =
        v_.cwiseAbs().colwise().sum().maxCoeff() * vinv_.cwiseAbs().colwise().sum().maxCoeff();
    if (!(cond < 1e4)) return;
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
      eigen_terms(d, e, s);
      eigen_matrix_hd<N>(v_.data(), vinv_.data(), mask_.data(), e.data(), k.data());
      eigen_matrix_hd<N>(v_.data(), vinv_.data(), mask_.data(), s.data(), g.data());
      return;
    }
    for (std::size_t i = 0; i < cache_d_.size(); ++i)
      if (cache_d_[i] == d) {
        k = cache_k_[i];
        g = cache_g_[i];
        return;
      }
    exact_transition<N>(a_, d, k, g);
    if (cache_d_.size() < 64) {
      cache_d_.push_back(d);
      cache_k_.push_back(k);
      cache_g_.push_back(g);
    }
  }

  // The eigenvalue terms of step(d) (only when fast()): e_i = exp(lambda_i d) and
  // s_i = (exp(lambda_i d) - 1) / lambda_i (d when lambda_i = 0), so that K = V diag(e) V^-1
  // and G = V diag(s) V^-1 before masking.
  void eigen_terms(double d, Vec<N>& e, Vec<N>& s) const {
    eigen_terms_hd<N>(lambda_.data(), d, e.data(), s.data());
  }

  const Mat<N>& a() const { return a_; }
  // True when K and G come from the eigendecomposition A = V diag(lambda) V^-1.
  bool fast() const { return fast_; }
  // The eigendecomposition (meaningful only when fast()).
  const Eigen::Matrix<double, N, N>& v() const { return v_; }
  const Eigen::Matrix<double, N, N>& vinv() const { return vinv_; }
  const Eigen::Matrix<double, N, 1>& lambda() const { return lambda_; }
  // The structural-zero mask of K and G (1 or 0), column-major.
  const Eigen::Matrix<double, N, N>& mask() const { return mask_; }

 private:
  Mat<N> a_;
  bool fast_ = false;
  Eigen::Matrix<double, N, N> v_, vinv_, mask_;
  Eigen::Matrix<double, N, 1> lambda_;
  std::vector<double> cache_d_;
  std::vector<Mat<N>> cache_k_, cache_g_;
};

// kSteady: the steady state of an SS dose record, set (SS=1) or added (SS=2) at the record's
// own time; the record's doses (its own, lagged or not, and ADDL) are kDose events.
enum Kind : int { kStop = 0, kReset = 1, kDose = 2, kObserve = 3, kBoundary = 4, kSteady = 5 };

struct Event {
  double time;
  int cls;           // at equal times: 0 infusion stops, 1 generated arrivals, 2 records
  std::int64_t seq;  // record index (file order)
  int sub;           // order within a record: boundary 0, reset 1, steady state 2, dose 3
  Kind kind;
  int cmt = 0;
  double amount = 0.0;  // after F
  double rate = 0.0;    // > 0: infusion
  double duration = 0.0;
  int ss = 0;
  double ii = 0.0;
  std::int64_t id = -1;   // infusion id
  std::int64_t row = -1;  // output row (observations)
};

// The processing order: time, then class (stops, generated arrivals, records), then file order.
inline bool before(const Event& a, const Event& b) {
  if (a.time != b.time) return a.time < b.time;
  if (a.cls != b.cls) return a.cls < b.cls;
  if (a.seq != b.seq) return a.seq < b.seq;
  return a.sub < b.sub;
}

struct Running {
  std::int64_t id;
  int cmt;
  double rate;
};

// Number of infusions of a steady-state infusion dose (duration `dur`, interval `ii` > 0) that
// were started k*ii ago with k >= 1 and are still running: those with k < k0.
inline std::int64_t steady_state_k0(double dur, double ii) {
  std::int64_t k0 = static_cast<std::int64_t>(std::ceil(dur / ii - 1e-12));
  if (k0 < 1) k0 = 1;
  return k0;
}

// Steady state just before a dose given every ii (the dose at this time not included).
// Appends the infusions of earlier doses still running at t to `runs` (rate, ends at).
template <int N>
Vec<N> steady_state(Propagator<N>& pr, const Event& d,
                    std::vector<std::pair<double, double>>& runs) {
  Mat<N> kii, gii;
  Vec<N> x = Vec<N>::Zero();
  if (d.ii == 0.0) {  // constant infusion at steady state: 0 = A x + r
    Vec<N> r = Vec<N>::Zero();
    r(d.cmt) = d.rate;
    const auto lu_a = pr.a().fullPivLu();
    // No equilibrium without elimination (A singular): the steady state does not exist.
    if (!lu_a.isInvertible()) return Vec<N>::Constant(std::numeric_limits<double>::quiet_NaN());
    x = lu_a.solve(-r);
    return x;
  }
  pr.step(d.ii, kii, gii);
  const Eigen::Matrix<double, N, N> i_minus_k = Eigen::Matrix<double, N, N>::Identity() - kii;
  const auto lu = i_minus_k.fullPivLu();
  // Without elimination I - K(ii) is singular and the doses accumulate without bound.
  if (!lu.isInvertible()) return Vec<N>::Constant(std::numeric_limits<double>::quiet_NaN());
  if (d.rate <= 0.0) {  // bolus: sum_{k>=1} K(k ii) b = K(ii) (I - K(ii))^-1 b
    Vec<N> b = Vec<N>::Zero();
    b(d.cmt) = d.amount;
    const Vec<N> y = lu.solve(b);
    return kii * y;
  }
  // Infusion of duration D every ii: infusions started k*ii ago with k*ii < D are running
  // (contributing G(k ii) r), the others finished (sum over k >= k0 of K(k ii - D) G(D) r).
  Vec<N> r = Vec<N>::Zero();
  r(d.cmt) = d.rate;
  const double dur = d.duration;
  const std::int64_t k0 = steady_state_k0(dur, d.ii);
  Mat<N> kk, gg;
  for (std::int64_t k = 1; k < k0; ++k) {
    pr.step(static_cast<double>(k) * d.ii, kk, gg);
    x += gg * r;
    runs.emplace_back(d.rate, d.time - static_cast<double>(k) * d.ii + dur);
  }
  Mat<N> kd, gd;
  pr.step(dur, kd, gd);
  pr.step(static_cast<double>(k0) * d.ii - dur, kk, gg);
  const Vec<N> y = lu.solve(Vec<N>(gd * r));
  x += kk * y;
  return x;
}

// No-op hooks of record_steady_state() (simulate_dataset needs none; the Predictor follows the
// sensitivities through them).
template <int N>
struct NoSteadyStateHooks {
  // The state just before the virtual arrival at d.time (before its dose).
  void arrival(const Event&, const Vec<N>&) {}
  // The virtual arrival's bolus of `amount` into d.cmt.
  void bolus(const Event&) {}
  // The state moved over dt from x_old with rates r (k, e, s: the step's K and eigenvalue terms).
  void step(double, const Mat<N>&, const Vec<N>&, const Vec<N>&, const Vec<N>&, const Vec<N>&) {}
  // An implied infusion of rate `rate` into d.cmt ended (its end moves with F).
  void stop(const Event&, double) {}
};

// Phase of an SS dose record's steady state at its own time (NONMEM, help "SS DOSE EVENT
// RECORD": steady state "is computed as if there were no ALAG, and then there is an advance to
// the appropriate point in the steady-state cycle (II-ALAG)"): the time since the last implied
// dose arrived, ii - lag, and 0 when lag >= ii (no advance).
inline double steady_state_phase(double ii, double lag) { return lag < ii ? ii - lag : 0.0; }

// The steady state of SS dose record `d` (d.time = the record's time t0; d.amount after F,
// d.rate, d.duration, d.ii, d.cmt) at t0, for a dose that arrives `lag` after its record time:
// the implied doses, given every ii since long before, arrived last at t0 - phase
// (steady_state_phase), and the state at t0 is the steady state that far into the cycle. The
// record's own dose is not included (it arrives at t0 + lag, a kDose event). `runs` receives the
// implied infusions still running at t0 (rate, end time). `r_before` receives the summed rates
// of the implied infusions just before t0 (d x / d t0 = A x + r_before: the derivative with
// respect to the phase). A constant infusion (ii 0) gives the equilibrium -A^-1 r and no runs
// (NONMEM: the infusion terminates at the event time of the SS dose record).
template <int N, class Hooks>
Vec<N> record_steady_state(Propagator<N>& pr, const Event& d, double lag,
                           std::vector<std::pair<double, double>>& runs, Vec<N>& r_before,
                           Hooks& hooks) {
  r_before.setZero();
  if (d.ii == 0.0) {
    const Vec<N> x = steady_state(pr, d, runs);
    hooks.arrival(d, x);
    return x;
  }
  const double phase = steady_state_phase(d.ii, lag);
  if (phase == d.ii) {  // no lag: the steady state just before a dose, in closed form
    Vec<N> x = steady_state(pr, d, runs);
    for (const auto& run : runs) r_before(d.cmt) += run.first;
    hooks.arrival(d, x);
    return x;
  }
  // The last implied arrival, at t0 - phase; then advance by phase.
  Event a = d;
  a.time = d.time - phase;
  const std::size_t first = runs.size();
  Vec<N> x = steady_state(pr, a, runs);
  hooks.arrival(a, x);
  if (a.rate > 0.0) {
    if (a.amount > 0.0) runs.emplace_back(a.rate, a.time + a.duration);
  } else {
    x(a.cmt) += a.amount;
    hooks.bolus(a);
  }
  double t = a.time;
  Mat<N> k, g;
  Vec<N> e = Vec<N>::Zero(), s = Vec<N>::Zero();
  while (true) {
    // The next end of an implied infusion before t0, or t0.
    double tb = d.time;
    for (std::size_t i = first; i < runs.size(); ++i)
      tb = std::min(tb, std::max(t, runs[i].second));
    Vec<N> r = Vec<N>::Zero();
    for (std::size_t i = first; i < runs.size(); ++i) r(d.cmt) += runs[i].first;
    if (tb > t) {
      pr.step(tb - t, k, g, e, s);
      hooks.step(tb - t, k, x, r, e, s);
      const Vec<N> y = k * x + g * r;
      x = y;
      r_before = r;
      t = tb;
    }
    // Implied infusions ending by now stop (at t0 too: they do not run past it).
    for (std::size_t i = first; i < runs.size();)
      if (runs[i].second <= t) {
        hooks.stop(d, runs[i].first);
        runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    if (t >= d.time) break;
  }
  return x;
}

}  // namespace pkscan::detail
