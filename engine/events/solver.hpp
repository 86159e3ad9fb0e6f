#pragma once
// The one event solver of pkscan: simulate_dataset() and the Predictor both run it, so a
// prediction is simulate_dataset()'s `prediction` by construction (the same code, the same
// bits). One solver per thread; it keeps its buffers across the subjects it runs.
//
// Numeric contract: between consecutive events the state moves by x <- K(d) x + G(d) r
// (events/event_list.hpp: K(d) = expm(A d), G(d) = integral_0^d expm(A u) du from an
// eigendecomposition of A or, when that is ill-conditioned, Eigen's scaling and squaring), in
// the order of detail::before; steady states in closed form (record_steady_state). float64
// throughout. Deterministic: the same inputs give the same bits for any thread count.
//
// Gradients are forward sensitivities s_k = dx/dp_k of x' = A(p) x + r(t; p), exact up to
// rounding. Over an interval of length d with constant A and infusion rates r,
//   s_k(t + d) = K s_k(t) + dK_k x(t) + dG_k r,
// with dK_k = L(A d, E_k d) the Frechet derivative of expm in the direction E_k = dA/dp_k and
// dG_k the same for G. When A = V diag(l) V^-1 is well conditioned (the propagator's fast path)
// the sensitivities are held in the eigenbasis (s~ = V^-1 s) where K is diagonal and
// (Daleckii-Krein) V^-1 dK_k V = Phi o E~_k, V^-1 dG_k V = Psi o E~_k with E~_k = V^-1 E_k V,
// Phi_ij = divided difference of exp(. d) at l_i, l_j and Psi_ij that of (exp(. d) - 1) / .,
// both evaluated without cancellation (series or expm1 for close eigenvalues). Otherwise dK_k and
// dG_k are blocks of the exponential of [[A, 0, I], [E_k, A, 0], [0, 0, 0]] d (Eigen).
// Events whose time moves with a parameter (a lagged arrival: d tau / d lag = 1; the end of a
// fixed-RATE infusion: d tau / d f = AMT / RATE) add (Gamma_x xdot- - xdot+) d tau / dp, where
// Gamma_x is the event's state map (I, or 0 for an SS=1 dose) and xdot = A x + r just before and
// after, both with the A of the interval that starts at the event: the derivative for the event
// moving later, the only one at lag 0, where a dose arrives exactly at its record's time and so
// at a change of the parameter row. Steady states are differentiated in closed form.
#include <cstdint>
#include <memory>
#include <pkscan/events.hpp>

#include "events/plan.hpp"

namespace pkscan::detail {

class EventSolver {
 public:
  virtual ~EventSolver() = default;

  // `plan` is always build_plan's (build_records' plans have no events).
  //
  // Predictions of subject s (concentrations of the observed compartments, plan.obs_count
  // values) into out; with jac (obs_count x np, row-major) also their Jacobian with respect to
  // the subject's parameter row `params`.
  // @throws DomainError (naming the record) for invalid parameter values
  virtual void predict(const SubjectPlan& plan, std::int64_t s, const double* params, double* out,
                       double* jac) = 0;

  // predict() with jac, and the Hessians of the predictions with respect to the columns
  // cols[0 .. m) into hess (obs_count x m x m; events/second_order.hpp).
  virtual void predict_hessian(const SubjectPlan& plan, std::int64_t s, const double* params,
                               double* out, double* jac, const int* cols, int m, double* hess) = 0;

  // simulate_dataset()'s rows of subject s, from row `first_row` on: amounts and concentrations
  // of every compartment, the prediction and (with `index_columns`; without, those `out` holds
  // already stay) the index columns at each observation record.
  // Returns false when some amount is not finite.
  // @throws DomainError (naming the record) for invalid parameter values
  virtual bool simulate_rows(const SubjectPlan& plan, std::int64_t s, const double* params,
                             DatasetResult& out, std::int64_t first_row,
                             bool index_columns = true) = 0;
};

// A solver for the model's compartment count. `max_rows` and `max_events` (the largest plan's
// parameter rows and events) size its buffers up front, so that evaluations allocate nothing.
std::unique_ptr<EventSolver> make_event_solver(const DatasetSetup& setup, std::size_t max_rows = 0,
                                               std::size_t max_events = 0);

// make_event_solver for N = setup.n compartments (1..6; events/solver_impl.hpp).
template <int N>
std::unique_ptr<EventSolver> make_event_solver_of(const DatasetSetup& setup, std::size_t max_rows,
                                                  std::size_t max_events);

}  // namespace pkscan::detail
