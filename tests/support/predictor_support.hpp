#pragma once
// Shared by the Predictor tests (tests/api: predictor_test.cpp, predictor_calls_test.cpp) and the
// event-walk cases of the agreement suite (support/agreement.hpp): models, parameter rows, datasets
// and the finite-difference check.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <pkscan/pkscan.hpp>
#include <pkscan/predictor.hpp>
#include <random>
#include <string>
#include <vector>

#include "support/datasets.hpp"
#include "support/expect_close.hpp"

namespace pkscan {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using test::parse_for;

inline std::shared_ptr<const ModelInfo> builtin(ModelKind k) {
  return std::shared_ptr<const ModelInfo>(std::shared_ptr<const ModelInfo>(), &model_info(k));
}

// The `linear` model used throughout: depot -> central <-> peripheral, elimination from central,
// and a second elimination from the peripheral sharing the rate `ke` (one parameter, two flows).
inline std::shared_ptr<const ModelInfo> linear_model() {
  return make_linear_model({"depot", "central", "peripheral"}, {{"depot", "central", "ka"},
                                                                {"central", "peripheral", "k12"},
                                                                {"peripheral", "central", "k21"},
                                                                {"central", "", "ke"},
                                                                {"peripheral", "", "ke"}});
}

// A parameter row: the model's defaults, then `values` by name.
inline std::vector<double> row_of(const ModelInfo& m,
                                  const std::vector<std::pair<std::string, double>>& v) {
  std::vector<double> r;
  for (const ParameterInfo& p : m.parameters) r.push_back(p.default_value);
  for (const auto& [name, value] : v) {
    const int c = parameter_index(m, name);
    if (c < 0) ADD_FAILURE() << "no parameter " << name << " in " << m.name;
    if (c >= 0) r[static_cast<std::size_t>(c)] = value;
  }
  return r;
}

// Typical values for every model: micro constants or clearances, with F != 1 and lag > 0 on the
// dosed compartments (depot, central) and non-default values elsewhere.
inline std::vector<double> typical_row(const ModelInfo& m, bool clearances) {
  std::vector<std::pair<std::string, double>> v = {
      {"ka", 1.3},         {"v_depot", 1.5},   {"v_central", 20.0},  {"f_depot", 0.7},
      {"lag_depot", 0.37}, {"f_central", 0.8}, {"lag_central", 0.25}};
  const int n = static_cast<int>(m.compartments.size());
  if (m.kind == ModelKind::Linear) {
    v = {{"ka", 1.3},
         {"k12", 0.4},
         {"k21", 0.15},
         {"ke", 0.22},
         {"v_depot", 1.5},
         {"v_central", 20.0},
         {"v_peripheral", 70.0},
         {"f_depot", 0.7},
         {"lag_depot", 0.37},
         {"f_central", 0.8},
         {"lag_central", 0.25},
         {"f_peripheral", 0.9},
         {"lag_peripheral", 0.1}};
    return row_of(m, v);
  }
  if (clearances)
    v.emplace_back("cl", 4.4);
  else
    v.emplace_back("ke", 0.22);
  if (n >= 3) {
    if (clearances) {
      v.emplace_back("q", 8.0);
    } else {
      v.emplace_back("k12", 0.4);
      v.emplace_back("k21", 0.15);
    }
  }
  if (m.kind == ModelKind::ThreeCompartment) {
    v.emplace_back("v_peripheral", 70.0);
    v.emplace_back("f_peripheral", 0.9);
    v.emplace_back("lag_peripheral", 0.1);
  }
  if (m.kind == ModelKind::FourCompartment) {
    v.emplace_back("v_peripheral1", 50.0);
    v.emplace_back("v_peripheral2", 90.0);
    if (clearances) {
      v.emplace_back("q2", 6.0);
    } else {
      v.emplace_back("k13", 0.3);
      v.emplace_back("k31", 0.05);
    }
    v.emplace_back("f_peripheral2", 0.9);
    v.emplace_back("lag_peripheral1", 0.1);
  }
  return row_of(m, v);
}

// Seven subjects covering every event kind, with observations away from every time that moves
// with a parameter (lagged arrivals: + 0.37 into the depot, + 0.25 into central; infusion ends
// at arrival + F AMT / RATE with F 0.8). KA is a dataset column on subject 7 (per-record values).
// Observations of the depot and (when the model has one) CMT 3 cover other volumes. DV is
// present except on the observation whose prediction is 0 (after the reset of subject 2).
inline std::string rich_csv(int compartments) {
  const std::string p = compartments >= 3 ? "3" : "2";  // a third compartment when there is one
  std::string csv = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,DV,KA\n";
  // 1: oral boluses with ADDL (0.37, 12.37, 24.37), an EVID 2 record, depot and CMT 3 samples.
  csv +=
      "1,0,100,.,1,1,12,2,.,.,.\n1,0.7,.,.,0,2,.,.,.,1.1,.\n1,1.9,.,.,0,2,.,.,.,2.4,.\n"
      "1,2.2,.,.,0,1,.,.,.,3.5,.\n1,5.3,.,.,0," +
      p +
      ",.,.,.,0.9,.\n1,8,.,.,2,.,.,.,.,.,.\n1,13.1,.,.,0,2,.,.,.,1.8,.\n"
      "1,20.2,.,.,0,2,.,.,.,1.2,.\n1,26,.,.,0,2,.,.,.,2.2,.\n1,30.5,.,.,0,2,.,.,.,1.5,.\n";
  // 2: infusion into central with F (arrives 0.25, ends 3.45), reset at 9, EVID 4 dose at 11.
  csv +=
      "2,0,200,50,1,2,.,.,.,.,.\n2,1.1,.,.,0,2,.,.,.,2.1,.\n2,2.6,.,.,0,2,.,.,.,5.5,.\n"
      "2,4.4,.,.,0,2,.,.,.,6.2,.\n2,7.9,.,.,0,2,.,.,.,3.3,.\n2,9,.,.,3,.,.,.,.,.,.\n"
      "2,10.3,.,.,0,2,.,.,.,.,.\n2,11,80,.,4,1,.,.,.,.,.\n2,12.2,.,.,0,2,.,.,.,1.9,.\n"
      "2,15.8,.,.,0,2,.,.,.,2.5,.\n";
  // 3: SS=1 bolus into the depot, II 12, ADDL 1 (arrivals 0.37, 12.37).
  csv +=
      "3,0,100,.,1,1,12,1,1,.,.\n3,1,.,.,0,2,.,.,.,4.1,.\n3,4.7,.,.,0,2,.,.,.,3.9,.\n"
      "3,11.1,.,.,0,2,.,.,.,2.8,.\n3,14,.,.,0,2,.,.,.,4.4,.\n3,20.9,.,.,0,2,.,.,.,3.1,.\n";
  // 4: a bolus, then SS=2 infusion shorter than II (arrives 6.25, ends 7.85).
  csv +=
      "4,0,50,.,1,1,.,.,.,.,.\n4,3.1,.,.,0,2,.,.,.,1.3,.\n4,6,120,60,1,2,12,.,2,.,.\n"
      "4,6.9,.,.,0,2,.,.,.,3.6,.\n4,9.5,.,.,0,2,.,.,.,2.7,.\n4,15.2,.,.,0,2,.,.,.,1.6,.\n";
  // 5: SS=1 infusion longer than II: D = 0.8 * 290 / 10 = 23.2 > II 8; infusions started
  // 8 and 16 h before run on (ends 7.45, 15.45), its own ends at 23.45.
  csv +=
      "5,0,290,10,1,2,8,.,1,.,.\n5,1.3,.,.,0,2,.,.,.,9.5,.\n5,5.2,.,.,0,2,.,.,.,10.1,.\n"
      "5,9.9,.,.,0,2,.,.,.,9.9,.\n5,17.6,.,.,0,2,.,.,.,8.7,.\n5,26,.,.,0,2,.,.,.,6.6,.\n";
  // 6: SS=1 constant infusion (AMT 0, II 0) into central.
  csv += "6,0,0,5,1,2,0,.,1,.,.\n6,2,.,.,0,2,.,.,.,1.1,.\n6,5,.,.,0,2,.,.,.,1.2,.\n";
  // 7: KA from the dataset on some records (the row's ka elsewhere).
  csv +=
      "7,0,100,.,1,1,.,.,.,.,.\n7,1.5,.,.,0,2,.,.,.,2.9,1.7\n7,3,.,.,0,2,.,.,.,3.3,.\n"
      "7,4,60,.,1,1,.,.,.,.,.\n7,6.2,.,.,0,2,.,.,.,3.7,0.6\n7,9,.,.,0,2,.,.,.,2.6,.\n";
  return csv;
}

// A random NONMEM dataset: every record kind, random times, doses, compartments and KA cells
// (no KA column when !ka).
inline std::string random_csv(std::mt19937_64& rng, int compartments, int subjects,
                              bool ka = true) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto pick = [&](int n) { return static_cast<int>(u(rng) * n) % n; };
  auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", x);
    return std::string(buf);
  };
  std::string csv =
      ka ? "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,KA\n" : "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS\n";
  for (int s = 1; s <= subjects; ++s) {
    double t = 0.0;
    const int records = 5 + pick(20);
    for (int j = 0; j < records; ++j) {
      if (j > 0 && pick(4) != 0) t += 0.1 + 4.0 * u(rng);
      const std::string id = std::to_string(s) + "," + num(t) + ",";
      const std::string kav = pick(4) == 0 ? num(0.3 + 2.0 * u(rng)) : ".";
      const std::string kacell = ka ? "," + kav : std::string();
      const std::string cmt = std::to_string(1 + pick(compartments));
      const int kind = j == 0 ? 1 : pick(10);
      if (kind <= 4 && j > 0) {  // observation
        csv += id + ".,.,0," + (pick(5) == 0 ? "." : cmt) + ",.,.,." + kacell + "\n";
      } else if (kind == 5) {
        csv += id + ".,.,2,.,.,.,." + kacell + "\n";
      } else if (kind == 6) {
        csv += id + ".,.,3,.,.,.,." + kacell + "\n";
      } else {  // a dose: bolus or infusion, maybe ADDL, maybe SS, maybe EVID 4
        const bool infusion = pick(3) == 0;
        const double amt = 10.0 + 200.0 * u(rng);
        const double rate = infusion ? amt / (0.2 + 20.0 * u(rng)) : 0.0;
        const int ss = pick(5) == 0 ? 1 + pick(2) : 0;
        const int addl = pick(3) == 0 ? 1 + pick(4) : 0;
        const double ii = (ss > 0 || addl > 0) ? 2.0 + 10.0 * u(rng) : 0.0;
        const int evid = kind == 7 ? 4 : 1;
        csv += id + num(amt) + "," + (infusion ? num(rate) : ".") + "," + std::to_string(evid) +
               "," + (pick(5) == 0 ? "." : cmt) + "," + (ii > 0 ? num(ii) : ".") + "," +
               (addl > 0 ? std::to_string(addl) : ".") + "," + (ss > 0 ? std::to_string(ss) : ".") +
               kacell + "\n";
      }
    }
    csv += std::to_string(s) + "," + num(t + 1.0 + 5.0 * u(rng)) + ",.,.,0,.,.,.,." +
           (ka ? ",." : "") + "\n";
  }
  return csv;
}

struct Case {
  std::string name;
  std::shared_ptr<const ModelInfo> model;
  bool clearances;
};

inline std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (ModelKind k :
       {ModelKind::TwoCompartment, ModelKind::ThreeCompartment, ModelKind::FourCompartment})
    for (bool cl : {false, true})
      cases.push_back({to_string(k) + (cl ? "/clearances" : "/micro"), builtin(k), cl});
  cases.push_back({"linear", linear_model(), false});
  return cases;
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Jacobian of every subject against central differences of predict(), for every column.
inline void check_gradients(const Predictor& pr, const std::vector<double>& row,
                            const std::string& what, int* checked) {
  const int np = pr.parameters();
  auto ws = pr.make_workspace();
  const ModelInfo& m = pr.model();
  for (std::int64_t s = 0; s < pr.subjects(); ++s) {
    const std::size_t n = static_cast<std::size_t>(pr.observations(s));
    std::vector<double> pred(n), jac(n * static_cast<std::size_t>(np)), base(n), up(n), down(n);
    pr.predict_gradient(s, row.data(), pred.data(), jac.data(), *ws);
    pr.predict(s, row.data(), base.data(), *ws);
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_EQ(pred[i], base[i]) << what << " subject " << s + 1 << " obs " << i;
    const double scale = max_abs(base);
    for (int c = 0; c < np; ++c) {
      const std::string name = m.parameters[static_cast<std::size_t>(c)].name;
      const double v = row[static_cast<std::size_t>(c)];
      if (std::isnan(v)) {  // an unused alternative: derivative 0
        for (std::size_t i = 0; i < n; ++i)
          EXPECT_EQ(jac[i * static_cast<std::size_t>(np) + static_cast<std::size_t>(c)], 0.0)
              << what << " subject " << s + 1 << " d/d" << name;
        continue;
      }
      const double mag = std::max(std::fabs(v), 0.05);
      // The step balances the differences' truncation (h^2 f''') against the predictions'
      // rounding over h: near-equal eigenvalues (ka 1e-3 from ke) leave predictions right to
      // only about 1e-11 relatively (the eigenvectors' condition), which a step of 1e-5 of the
      // value would amplify to 1e-6.
      const double h = 1e-4 * mag;
      // Central differences; at a lower bound (a lag of 0) the second-order one-sided formula
      // (-3 f(v) + 4 f(v + h) - f(v + 2h)) / 2h.
      const bool one_sided = v - h < 0.0;
      std::vector<double> r = row;
      r[static_cast<std::size_t>(c)] = v + h;
      pr.predict(s, r.data(), up.data(), *ws);
      r[static_cast<std::size_t>(c)] = one_sided ? v + 2.0 * h : v - h;
      pr.predict(s, r.data(), down.data(), *ws);
      const double atol = 1e-8 * scale / mag;
      for (std::size_t i = 0; i < n; ++i) {
        const double fd = one_sided ? (-3.0 * base[i] + 4.0 * up[i] - down[i]) / (2.0 * h)
                                    : (up[i] - down[i]) / (2.0 * h);
        const double got = jac[i * static_cast<std::size_t>(np) + static_cast<std::size_t>(c)];
        PKSCAN_EXPECT_CLOSE(fd, got, 1e-6, atol,
                            what << " subject " << s + 1 << " obs " << i << " d pred / d " << name);
        ++*checked;
      }
    }
  }
}

}  // namespace
}  // namespace pkscan
