// Transition matrices of the exact discretization: K = expm(A h) and G(h) = h phi1(A h), with
// phi1(X) = sum_j X^j / (j + 1)! = integral_0^1 expm(X u) du. Both start from X = A h / 2^s, s
// the least integer making ||X||_1 <= 1/2, and phi1(X) by its Taylor polynomial in Horner form,
// of the least degree m <= 15 whose remainder (below ||X||^(m+1) e^||X|| / (m+2)! in norm) is
// under 2^-56 (m = 15 for ||X|| = 1/2: 7e-20); expm(X) - I = X phi1(X). Then s doublings
// G(2u) = (I + expm(A u)) G(u), expm(2 A u) = expm(A u)^2:
//  - s <= 5 (||A h||_1 <= 16, every grid of a usual PK model): on the N x N matrices as they are
//    (the phi-function form of Sidje's Expokit). Each doubling at most doubles the relative error,
//    so 32 ulps at most.
//  - s > 5 (stiff: a rate constant far above 1 / h): each doubling would double the error of the
//    slow modes, whose information lies in how far expm(A u) is below I (ka = 1e14 with h = 0.5
//    would lose 45 doublings' worth, 2^45 ulps). The rate matrix of a compartment model has
//    non-negative flows off its diagonal, so expm(A u) and G(u) are non-negative: the doublings
//    form every entry as a sum of products of non-negative numbers, which loses nothing to
//    cancellation, and carry each column's mass loss c^T = 1^T (I - expm(A u)) the same way
//    (c(2u)^T = c(u)^T (I + expm(A u)), started from the eliminations); a diagonal entry near 1
//    is 1 - (loss + what moved out of the column), so the slow modes keep their digits (as
//    expm1 keeps exp(x) - 1). Entrywise relative accuracy stays about s ulps for rate constants
//    up to the largest double (tests/grid/transition_test.cpp: closed forms and mpmath,
//    1e-300 .. 1e300). A matrix with a negative off-diagonal entry (none of the models') keeps
//    the plain doublings.
#include "grid/transition.hpp"

#include <cmath>
#include <limits>

namespace pkscan::detail {

// Doublings the Taylor path takes at most (||A h||_1 <= 2^(kMaxDoublings - 1)).
constexpr int kMaxDoublings = 5;

template <int N>
void exact_transition(const Mat<N>& a, double h, Mat<N>& k, Mat<N>& g) {
  // 1 / (j + 1)! for j = 0 .. 15.
  static constexpr double kInvFact[16] = {1.0,
                                          1.0 / 2,
                                          1.0 / 6,
                                          1.0 / 24,
                                          1.0 / 120,
                                          1.0 / 720,
                                          1.0 / 5040,
                                          1.0 / 40320,
                                          1.0 / 362880,
                                          1.0 / 3628800,
                                          1.0 / 39916800,
                                          1.0 / 479001600,
                                          1.0 / 6227020800,
                                          1.0 / 87178291200,
                                          1.0 / 1307674368000,
                                          1.0 / 20922789888000};
  const double norm = (a * h).cwiseAbs().colwise().sum().maxCoeff();
  int s = 0;
  for (double n = norm; n > 0.5 && n <= std::numeric_limits<double>::max(); n *= 0.5) ++s;
  if (!std::isfinite(norm)) {
    if (!a.allFinite() || !std::isfinite(h)) {  // NaN results: the subject is non-finite
      k.setConstant(std::numeric_limits<double>::quiet_NaN());
      g.setConstant(std::numeric_limits<double>::quiet_NaN());
      return;
    }
    // A h (or a column sum) overflows: s from the exponents of ||A / 2^8||_1 and h.
    const double norm_a = (a * 0x1.0p-8).cwiseAbs().colwise().sum().maxCoeff();
    int ea = 0, eh = 0;
    std::frexp(norm_a, &ea);
    std::frexp(h, &eh);
    s = ea + 8 + eh + 1;  // ||A h||_1 < 2^(ea + 8 + eh) <= 2^(s - 1)
  }
  const double hs = std::ldexp(h, -s);
  const Mat<N> x = a * hs;
  // The least degree m <= 15 whose remainder bound nu^(m+1) e^nu / (m+2)! is below 2^-56
  // (nu = ||X||_1 <= 1/2; m = 15 meets it for every such nu).
  const double nu = x.cwiseAbs().colwise().sum().maxCoeff();
  int m = 0;
  for (double rem = nu * std::exp(nu) / 2; m < 15 && rem > 0x1.0p-56; rem *= nu / (m + 2)) ++m;
  Mat<N> phi = Mat<N>::Identity() * kInvFact[m];
  for (int j = m - 1; j >= 0; --j) {
    const Mat<N> t = x * phi;
    phi = t;
    phi.diagonal().array() += kInvFact[j];
  }
  Mat<N> e = x * phi;  // expm(X) - I
  Mat<N> gu = phi * hs;
  bool metzler = true;
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j)
      if (i != j && a(i, j) < 0.0) metzler = false;
  if (s <= kMaxDoublings || !metzler) {
    e.diagonal().array() += 1.0;
    for (int i = 0; i < s; ++i) {
      const Mat<N> eg = e * gu;
      gu += eg;
      const Mat<N> ee = e * e;
      e = ee;
    }
    k = e;
    g = gu;
    return;
  }
  // Stiff: kk = expm(A u) and the mass each column loses over u, c^T = 1^T (I - expm(A u)) =
  // hs e^T phi1(X) at the start (e: each compartment's elimination, minus A's column sum).
  Mat<N> kk = e;
  double c[N];
  // Each compartment's elimination, minus A's column sum, summed in twice the working precision
  // (Ogita, Rump and Oishi's Sum2: TwoSum's rounding errors added up): a compartment that
  // exchanges at 1e5 with another holds rounding residues of 1e-11 in its column sum, which a
  // plain sum would turn into an elimination of that size.
  double out[N];
  for (int i = 0; i < N; ++i) {
    double sum = 0.0, err = 0.0;
    for (int q = 0; q < N; ++q) {
      const double x = -a(q, i), t = sum + x, z = t - sum;
      err += (sum - (t - z)) + (x - z);
      sum = t;
    }
    out[i] = std::max(sum + err, 0.0);
  }
  for (int j = 0; j < N; ++j) {
    double cj = 0.0;
    for (int i = 0; i < N; ++i) cj += out[i] * phi(i, j);
    c[j] = std::max(cj * hs, 0.0);
    double off = 0.0;
    for (int i = 0; i < N; ++i)
      if (i != j) off += kk(i, j);
    kk(j, j) = 1.0 - (c[j] + off);
  }
  for (int it = 0; it < s; ++it) {
    Mat<N> kn, gn;
    double cn[N];
    for (int j = 0; j < N; ++j) {
      double cj = c[j];  // c(2u)^T = c(u)^T (I + expm(A u))
      for (int q = 0; q < N; ++q) cj += c[q] * kk(q, j);
      cn[j] = cj;
      for (int i = 0; i < N; ++i) {
        double sg = gu(i, j);  // G(2u) = G(u) + expm(A u) G(u)
        for (int q = 0; q < N; ++q) sg += kk(i, q) * gu(q, j);
        gn(i, j) = sg;
        double sk = 0.0;  // expm(2 A u) = expm(A u)^2
        for (int q = 0; q < N; ++q) sk += kk(i, q) * kk(q, j);
        kn(i, j) = sk;
      }
    }
    for (int j = 0; j < N; ++j) {
      // A diagonal entry near 1 from what the column keeps: 1 - (loss + what moved out).
      double moved = cn[j];
      for (int i = 0; i < N; ++i)
        if (i != j) moved += kn(i, j);
      if (moved <= 0.5) kn(j, j) = 1.0 - moved;
      c[j] = cn[j];
    }
    kk = kn;
    gu = gn;
  }
  k = kk;
  g = gu;
}

template <int N>
void build_transition(const Mat<N>& a, double dt, Discretization disc,
                      const std::vector<double>& partial_lengths, Transition<N>& out) {
  out.partial.resize(partial_lengths.size());
  if (disc == Discretization::Euler) {
    out.k = Mat<N>::Identity() + a * dt;
    out.g = Mat<N>::Identity() * dt;
    for (std::size_t i = 0; i < partial_lengths.size(); ++i)
      out.partial[i] = Mat<N>::Identity() * partial_lengths[i];
    return;
  }
  exact_transition<N>(a, dt, out.k, out.g);
  for (std::size_t i = 0; i < partial_lengths.size(); ++i) {
    const double h = partial_lengths[i];
    Mat<N> kh, gh, krest, grest;
    exact_transition<N>(a, h, kh, gh);
    exact_transition<N>(a, dt - h, krest, grest);
    out.partial[i] = krest * gh;
  }
}

#define PKSCAN_INSTANTIATE_TRANSITION(N)                                      \
  template void exact_transition<N>(const Mat<N>&, double, Mat<N>&, Mat<N>&); \
  template void build_transition<N>(const Mat<N>&, double, Discretization,    \
                                    const std::vector<double>&, Transition<N>&);
PKSCAN_INSTANTIATE_TRANSITION(1)
PKSCAN_INSTANTIATE_TRANSITION(2)
PKSCAN_INSTANTIATE_TRANSITION(3)
PKSCAN_INSTANTIATE_TRANSITION(4)
PKSCAN_INSTANTIATE_TRANSITION(5)
PKSCAN_INSTANTIATE_TRANSITION(6)
#undef PKSCAN_INSTANTIATE_TRANSITION

}  // namespace pkscan::detail
