// Predictor::predict_hessian and log_likelihood_hessian: exact second derivatives against a
// closed form, against central differences of the exact first derivatives, for symmetry, and
// bad input.
#include <algorithm>

#include "support/agreement.hpp"
#include "support/predictor_support.hpp"

namespace pkscan {
namespace {

// The columns with a value (the used ones of alternative pairs).
std::vector<int> used_columns(const std::vector<double>& row) {
  std::vector<int> cols;
  for (std::size_t c = 0; c < row.size(); ++c)
    if (!std::isnan(row[c])) cols.push_back(static_cast<int>(c));
  return cols;
}

// An intravenous bolus D into the central compartment of the one-compartment model in
// clearances: C = D / V exp(-CL t / V), differentiated by hand.
TEST(PredictorHessian, EqualsTheClosedFormOfAnIntravenousBolus) {
  const auto model = builtin(ModelKind::TwoCompartment);
  const Predictor pr(
      parse_for(*model, "ID,TIME,AMT,EVID,CMT\n1,0,100,1,2\n1,0.5,.,0,2\n1,3,.,0,2\n1,12,.,0,2\n"),
      model);
  const std::vector<double> row =
      row_of(*model, {{"ka", 1.0}, {"cl", 4.4}, {"v_central", 20.0}, {"ke", kNaN}});
  const int cl = parameter_index(*model, "cl"), v = parameter_index(*model, "v_central");
  const int cols[2] = {cl, v};
  auto ws = pr.make_workspace();
  std::vector<double> out(3), jac(3 * static_cast<std::size_t>(pr.parameters())), hess(12);
  pr.predict_hessian(0, row.data(), cols, 2, out.data(), jac.data(), hess.data(), *ws);
  const double d = 100.0, clv = 4.4, vv = 20.0;
  const double times[3] = {0.5, 3.0, 12.0};
  for (int o = 0; o < 3; ++o) {
    const double t = times[o];
    const double c = d / vv * std::exp(-clv * t / vv);
    const double g = -1.0 / vv + clv * t / (vv * vv);  // d log C / dV
    const double h_cl_cl = (t / vv) * (t / vv) * c;
    const double h_cl_v = (t / (vv * vv)) * c - (t / vv) * c * g;
    const double h_v_v = c * g * g + c * (1.0 / (vv * vv) - 2.0 * clv * t / (vv * vv * vv));
    const double* h = hess.data() + 4 * o;
    PKSCAN_EXPECT_CLOSE(h_cl_cl, h[0], 1e-12, 0.0, "d2C/dCL2 at " << t);
    PKSCAN_EXPECT_CLOSE(h_cl_v, h[1], 1e-12, 0.0, "d2C/dCL dV at " << t);
    PKSCAN_EXPECT_CLOSE(h_cl_v, h[2], 1e-12, 0.0, "d2C/dV dCL at " << t);
    PKSCAN_EXPECT_CLOSE(h_v_v, h[3], 1e-12, 0.0, "d2C/dV2 at " << t);
  }
}

// The Hessian of every subject of `pr` at `row` over its used columns against central
// differences of the exact Jacobian (relative 1e-6); counts the entries checked. Fourth order,
// step 1e-4 relative: truncation far below 1e-10, and the Jacobian's own rounding (about 1e-13
// relative on the eigenbasis path) divided by the step about 1e-9; the steps stay clear of the
// events whose times move with F and lag. A column at 0 (a lag at its bound) is differentiated
// from one side only: not compared.
void check_hessian(const Predictor& pr, const std::vector<double>& row, const std::string& name,
                   int& checked) {
  const std::vector<int> cols = used_columns(row);
  const std::size_t m = cols.size(), np = static_cast<std::size_t>(pr.parameters());
  auto ws = pr.make_workspace();
  for (std::int64_t s = 0; s < pr.subjects(); ++s) {
    const std::size_t obs = static_cast<std::size_t>(pr.observations(s));
    std::vector<double> out(obs), jac(obs * np), hess(obs * m * m), f(obs), jf(obs * np),
        fd(obs * np), base(obs), base_jac(obs * np);
    pr.predict_hessian(s, row.data(), cols.data(), static_cast<int>(m), out.data(), jac.data(),
                       hess.data(), *ws);
    pr.predict_gradient(s, row.data(), base.data(), base_jac.data(), *ws);
    for (std::size_t i = 0; i < obs; ++i) ASSERT_EQ(out[i], base[i]) << name;
    for (std::size_t i = 0; i < jac.size(); ++i) ASSERT_EQ(jac[i], base_jac[i]) << name;
    const double scale = max_abs(base);
    for (std::size_t b = 0; b < m; ++b) {
      const std::size_t cb = static_cast<std::size_t>(cols[b]);
      if (row[cb] == 0.0) continue;
      const double mb = std::max(std::fabs(row[cb]), 0.05);
      const double h = 1e-4 * mb;
      // (8 (J(+h) - J(-h)) - (J(+2h) - J(-2h))) / (12 h)
      std::fill(fd.begin(), fd.end(), 0.0);
      const double steps[4] = {h, -h, 2 * h, -2 * h}, weights[4] = {8.0, -8.0, -1.0, 1.0};
      for (int k = 0; k < 4; ++k) {
        std::vector<double> r = row;
        r[cb] = row[cb] + steps[k];
        pr.predict_gradient(s, r.data(), f.data(), jf.data(), *ws);
        for (std::size_t i = 0; i < fd.size(); ++i) fd[i] += weights[k] * jf[i] / (12.0 * h);
      }
      for (std::size_t a = 0; a < m; ++a) {
        const std::size_t ca = static_cast<std::size_t>(cols[a]);
        const double ma = std::max(std::fabs(row[ca]), 0.05);
        for (std::size_t i = 0; i < obs; ++i) {
          const double want = fd[i * np + ca];
          const double got = hess[(i * m + a) * m + b];
          PKSCAN_EXPECT_CLOSE(want, got, 1e-6, 1e-9 * scale / (ma * mb),
                              name << " subject " << s + 1 << " obs " << i << " d2/d"
                                   << pr.model().parameters[ca].name << " d"
                                   << pr.model().parameters[cb].name);
          ++checked;
        }
      }
    }
  }
}

// Every second derivative of every used column against central differences of the exact
// Jacobian, for 2 to 4 compartments in micro constants and clearances and a linear model,
// through boluses, ADDL, lags, F, an infusion, a reset, SS=1 and SS=2 steady states of boluses
// and infusions (shorter and longer than II, constant), and dataset KA (rich_csv).
TEST(PredictorHessian, EqualsCentralDifferencesOfTheExactJacobian) {
  int checked = 0;
  for (const Case& c : all_cases()) {
    const int n = static_cast<int>(c.model->compartments.size());
    const Predictor pr(parse_for(*c.model, rich_csv(n)), c.model);
    check_hessian(pr, typical_row(*c.model, c.clearances), c.name, checked);
  }
  EXPECT_GT(checked, 5000);
}

// The same for declared models of 1, 5 and 6 compartments with random rates, volumes, F and lags.
TEST(PredictorHessian, EqualsCentralDifferencesForOneFiveAndSixCompartments) {
  // One compartment: a bolus with ADDL, an infusion, SS=1 and SS=2 doses, a constant infusion,
  // a reset.
  const std::string one =
      "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,DV\n"
      "1,0,100,.,1,1,12,2,.,.\n1,1.3,.,.,0,1,.,.,.,1\n1,13.9,.,.,0,1,.,.,.,1\n"
      "1,14,50,20,1,1,.,.,.,.\n1,15.1,.,.,0,1,.,.,.,1\n1,20.3,.,.,0,1,.,.,.,1\n"
      "2,0,100,.,1,1,12,.,1,.\n2,2.9,.,.,0,1,.,.,.,1\n2,6,60,20,1,1,8,.,2,.\n"
      "2,7.7,.,.,0,1,.,.,.,1\n2,10,.,.,3,.,.,.,.,.\n2,11,40,.,1,1,.,.,.,.\n2,12.6,.,.,0,1,.,.,.,1\n"
      "3,0,0,5,1,1,0,.,1,.\n3,1.1,.,.,0,1,.,.,.,1\n3,4.2,.,.,0,1,.,.,.,1\n";
  std::mt19937_64 rng(11);
  int checked = 0;
  for (const EventModel& em : event_models()) {
    const int n = static_cast<int>(em.model->compartments.size());
    if (!em.declared || n == 3) continue;
    const Predictor pr(parse_for(*em.model, n == 1 ? one : rich_csv(n)), em.model);
    check_hessian(pr, random_event_row(em, rng), em.name, checked);
  }
  EXPECT_GT(checked, 2000);
}

// The columns in reverse order give the transposed Hessian (each pair is computed once, in the
// order of the list: the two orders run different arithmetic), to rounding.
TEST(PredictorHessian, IsSymmetricInTheOrderOfTheColumns) {
  for (const Case& c : all_cases()) {
    const int n = static_cast<int>(c.model->compartments.size());
    const Predictor pr(parse_for(*c.model, rich_csv(n)), c.model);
    const std::vector<double> row = typical_row(*c.model, c.clearances);
    const std::vector<int> cols = used_columns(row);
    std::vector<int> rev(cols.rbegin(), cols.rend());
    const std::size_t m = cols.size(), np = static_cast<std::size_t>(pr.parameters());
    auto ws = pr.make_workspace();
    for (std::int64_t s = 0; s < pr.subjects(); ++s) {
      const std::size_t obs = static_cast<std::size_t>(pr.observations(s));
      std::vector<double> out(obs), jac(obs * np), h1(obs * m * m), h2(obs * m * m);
      pr.predict_hessian(s, row.data(), cols.data(), static_cast<int>(m), out.data(), jac.data(),
                         h1.data(), *ws);
      pr.predict_hessian(s, row.data(), rev.data(), static_cast<int>(m), out.data(), jac.data(),
                         h2.data(), *ws);
      const double scale = max_abs(h1);
      for (std::size_t i = 0; i < obs; ++i)
        for (std::size_t a = 0; a < m; ++a)
          for (std::size_t b = 0; b < m; ++b)
            PKSCAN_EXPECT_CLOSE(h1[(i * m + a) * m + b],
                                h2[(i * m + (m - 1 - b)) * m + (m - 1 - a)], 1e-10, 1e-14 * scale,
                                c.name << " subject " << s + 1);
    }
  }
}

// The log-likelihood's Hessian over (columns, sigmas) against central differences of the exact
// log-likelihood gradient, for every error model; its value and gradient are log_likelihood()'s.
TEST(PredictorHessian, LogLikelihoodHessianEqualsCentralDifferencesOfTheGradient) {
  const Case c{"three_compartment/clearances", builtin(ModelKind::ThreeCompartment), true};
  const Predictor pr(parse_for(*c.model, rich_csv(3)), c.model);
  const std::vector<double> row = typical_row(*c.model, true);
  const std::vector<int> cols = {parameter_index(*c.model, "ka"), parameter_index(*c.model, "cl"),
                                 parameter_index(*c.model, "v_central"),
                                 parameter_index(*c.model, "lag_depot")};
  const std::size_t m = cols.size(), np = static_cast<std::size_t>(pr.parameters());
  auto ws = pr.make_workspace();
  const ErrorModel models[4] = {{ErrorModelKind::Additive, false},
                                {ErrorModelKind::Proportional, false},
                                {ErrorModelKind::Combined, false},
                                {ErrorModelKind::Additive, true}};
  for (const ErrorModel& e : models) {
    const int ns = e.parameter_count();
    const std::size_t nv = m + static_cast<std::size_t>(ns);
    const double sig0[2] = {e.log_scale ? 0.4 : (ns == 2 ? 0.3 : 0.5), 0.2};
    for (std::int64_t s = 0; s < pr.subjects(); ++s) {
      std::vector<double> g(nv), h(nv * nv), full(np), sg(2);
      const double ll = pr.log_likelihood_hessian(s, row.data(), cols.data(), static_cast<int>(m),
                                                  e, sig0, g.data(), h.data(), *ws);
      EXPECT_EQ(ll, pr.log_likelihood(s, row.data(), e, sig0, full.data(), sg.data(), *ws));
      for (std::size_t a = 0; a < m; ++a) EXPECT_EQ(g[a], full[static_cast<std::size_t>(cols[a])]);
      // Central differences of the gradient in each variable.
      for (std::size_t b = 0; b < nv; ++b) {
        std::vector<double> r = row;
        double sg_up[2] = {sig0[0], sig0[1]}, sg_down[2] = {sig0[0], sig0[1]};
        const double v = b < m ? row[static_cast<std::size_t>(cols[b])] : sig0[b - m];
        const double step = 1e-5 * std::max(std::fabs(v), 0.05);
        std::vector<double> gu(np), gd(np), su(2), sd(2);
        if (b < m) r[static_cast<std::size_t>(cols[b])] = v + step;
        if (b >= m) sg_up[b - m] = v + step;
        pr.log_likelihood(s, r.data(), e, sg_up, gu.data(), su.data(), *ws);
        if (b < m) r[static_cast<std::size_t>(cols[b])] = v - step;
        if (b >= m) sg_down[b - m] = v - step;
        pr.log_likelihood(s, r.data(), e, sg_down, gd.data(), sd.data(), *ws);
        for (std::size_t a = 0; a < nv; ++a) {
          const double up = a < m ? gu[static_cast<std::size_t>(cols[a])] : su[a - m];
          const double down = a < m ? gd[static_cast<std::size_t>(cols[a])] : sd[a - m];
          const double fd = (up - down) / (2.0 * step);
          PKSCAN_EXPECT_CLOSE(fd, h[a * nv + b], 1e-6, 1e-6 * (std::fabs(ll) + 1.0),
                              to_string(e.kind) << (e.log_scale ? " log" : "") << " subject "
                                                << s + 1 << " entry " << a << "," << b);
        }
      }
    }
  }
}

TEST(PredictorHessian, RefusesBadColumns) {
  const auto model = builtin(ModelKind::TwoCompartment);
  const Predictor pr(parse_for(*model, rich_csv(2)), model);
  const std::vector<double> row = typical_row(*model, false);
  auto ws = pr.make_workspace();
  std::vector<double> out(64), jac(64 * 32), hess(64 * 16);
  const int ka = parameter_index(*model, "ka");
  const int bad[2] = {ka, 99}, twice[2] = {ka, ka}, ok[1] = {ka};
  EXPECT_THROW(pr.predict_hessian(0, row.data(), bad, 2, out.data(), jac.data(), hess.data(), *ws),
               InvalidArgument);
  EXPECT_THROW(
      pr.predict_hessian(0, row.data(), twice, 2, out.data(), jac.data(), hess.data(), *ws),
      InvalidArgument);
  // Out of the domain: -infinity with zero gradient and Hessian, never an exception.
  const ErrorModel add{ErrorModelKind::Additive, false};
  const double sigma = 0.5;
  std::vector<double> bad_row = row, g(2, 1.0), h(4, 1.0);
  bad_row[static_cast<std::size_t>(ka)] = -1.0;
  EXPECT_EQ(
      pr.log_likelihood_hessian(0, bad_row.data(), ok, 1, add, &sigma, g.data(), h.data(), *ws),
      -std::numeric_limits<double>::infinity());
  for (double x : g) EXPECT_EQ(x, 0.0);
  for (double x : h) EXPECT_EQ(x, 0.0);
}

}  // namespace
}  // namespace pkscan
