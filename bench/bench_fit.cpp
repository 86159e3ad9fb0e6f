// pkscan-bench's population-estimation cells (bench.hpp, --fit): a FOCEI fit from its initial
// estimates and its sandwich covariance step, timed, with the same fit on a finite-difference
// outer gradient in the same run (objective evaluations and seconds of both).
//   theoph:    NONMEM's THEO model on R's Theoph data (tests/data/estimation/theo.csv), NONMEM's
//              initial estimates (12 subjects, 132 observations, 11 estimated quantities).
//   simulated: N subjects of a three-compartment oral model (depot, central, peripheral) after
//              100 mg, `observations` samples each from 0.25 to 48 h (log-spaced), 4 ETAs
//              (ka, cl, v_central, v_peripheral), proportional and additive error; the DVs
//              simulated by run_design (seeded), the fit started 20% off the truth.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

#include "bench.hpp"

namespace pkscan::bench {

namespace {

// Keeps each replicate's DV, in row order.
class DvSink final : public DesignSink {
 public:
  void write(const DesignChunk& c) override { dv.assign(c.dv, c.dv + c.result->rows()); }
  void commit() override {}
  std::vector<double> dv;
};

struct Problem {
  std::shared_ptr<const Dataset> data;
  ModelKind model;
  PopulationFitSpec spec;
};

int column(ModelKind m, const char* name) { return parameter_index(model_info(m), name); }

Problem theoph() {
  Problem p;
  p.model = ModelKind::TwoCompartment;
  p.data = std::make_shared<const Dataset>(read_dataset(
      std::string(PKSCAN_SOURCE_DIR) + "/tests/data/estimation/theo.csv", model_info(p.model)));
  PopulationModel& pm = p.spec.initial;
  for (const ParameterInfo& q : model_info(p.model).parameters)
    pm.theta_row.push_back(q.default_value);
  const int ka = column(p.model, "ka"), v = column(p.model, "v_central"),
            ke = column(p.model, "ke");
  pm.theta_row[static_cast<std::size_t>(ka)] = 2;
  pm.theta_row[static_cast<std::size_t>(v)] = 50;
  pm.theta_row[static_cast<std::size_t>(ke)] = 0.1;
  pm.eta_columns = {ka, v, ke};
  pm.omega = Eigen::MatrixXd::Constant(3, 3, 0.1);
  pm.omega.diagonal().setConstant(0.2);
  pm.sigma_proportional = 0.1;
  pm.sigma_additive = 0.1;
  p.spec.theta_columns = {ka, v, ke};
  p.spec.theta_lower = {0, 0, 0};
  p.spec.theta_upper = {1e6, 1e6, 1e6};
  p.spec.omega_block = true;
  return p;
}

Problem simulated(const BenchOptions& o) {
  Problem p;
  p.model = ModelKind::ThreeCompartment;
  const ModelInfo& m = model_info(p.model);
  Dataset d;
  d.file = "bench:fit";
  d.columns = {"ID", "TIME", "AMT", "CMT", "EVID", "DV"};
  std::int64_t line = 2;
  for (std::int64_t i = 0; i < o.n; ++i) {
    DatasetSubject s;
    s.id = std::to_string(i + 1);
    DatasetRecord dose;
    dose.line = line++;
    dose.evid = 1;
    dose.amt = 100.0;
    dose.cmt = 1;
    dose.mdv = true;
    s.records.push_back(dose);
    for (int k = 0; k < o.observations; ++k) {
      DatasetRecord obs;
      obs.line = line++;
      obs.time = o.observations == 1
                     ? 1.0
                     : 0.25 * std::pow(192.0, static_cast<double>(k) / (o.observations - 1));
      obs.cmt = 2;
      s.records.push_back(obs);
    }
    d.subjects.push_back(std::move(s));
  }
  const double truth[5] = {1.5, 3.0, 20.0, 8.0, 40.0};
  const char* names[5] = {"ka", "cl", "v_central", "q", "v_peripheral"};
  DesignRun run;
  run.data = std::make_shared<const Dataset>(d);
  run.population = PopulationSpec(p.model, 0, o.seed + 1);
  for (int k = 0; k < 5; ++k) run.population.set_typical(names[k], truth[k]);
  run.population.iiv = {column(p.model, "ka"), column(p.model, "cl"), column(p.model, "v_central"),
                        column(p.model, "v_peripheral")};
  run.population.omega = Eigen::Vector4d(0.09, 0.09, 0.04, 0.04).asDiagonal();
  ResidualError e;
  e.proportional = 0.1;
  e.additive = 0.05;
  run.residual = e;
  run.options.threads = o.threads;
  DvSink sink;
  run_design(run, sink);
  std::size_t row = 0;
  for (DatasetSubject& s : d.subjects)
    for (DatasetRecord& r : s.records)
      if (r.evid == 0) {
        r.dv = sink.dv[row++];
        r.mdv = false;
      }
  p.data = std::make_shared<const Dataset>(std::move(d));

  PopulationModel& pm = p.spec.initial;
  for (const ParameterInfo& q : m.parameters) pm.theta_row.push_back(q.default_value);
  for (int k = 0; k < 5; ++k) {
    const int c = column(p.model, names[k]);
    pm.theta_row[static_cast<std::size_t>(c)] = 1.2 * truth[k];
    p.spec.theta_columns.push_back(c);
    p.spec.theta_lower.push_back(0.0);
    p.spec.theta_upper.push_back(std::numeric_limits<double>::infinity());
  }
  pm.eta_columns = run.population.iiv;
  pm.omega = Eigen::Matrix4d::Identity() * 0.1;
  pm.sigma_proportional = 0.15 * 0.15;
  pm.sigma_additive = 0.1 * 0.1;
  return p;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void run_fit_bench(const BenchOptions& o, std::ostream& out) {
  if (o.fit != "theoph" && o.fit != "simulated")
    throw InvalidArgument("--fit is \"" + o.fit + "\", but must be theoph or simulated");
  const Problem p = o.fit == "theoph" ? theoph() : simulated(o);
  const Predictor predictor(*p.data, p.model);
  EstimationOptions options;
  options.method = EstimationMethod::Focei;
  options.threads = o.threads;
  auto t0 = std::chrono::steady_clock::now();
  const PopulationFit fit = fit_population(predictor, p.spec, options, 100000);
  const double fit_s = seconds_since(t0);
  PopulationFitSpec at = p.spec;
  at.initial = fit.estimates;
  t0 = std::chrono::steady_clock::now();
  const CovarianceStep cov = covariance_step(predictor, at, options, CovarianceKind::Sandwich);
  const double cov_s = seconds_since(t0);

  EstimationOptions fd = options;
  fd.finite_difference_gradient = true;
  t0 = std::chrono::steady_clock::now();
  const PopulationFit fd_fit = fit_population(predictor, p.spec, fd, 100000);
  const double fd_s = seconds_since(t0);

  std::int64_t observations = 0;
  for (const SubjectObjective& s : fit.objective.subjects) observations += s.observations;
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "{\"workload\": \"fit\", \"fit\": \"%s\", \"method\": \"focei\", \"subjects\": %lld, "
      "\"observations\": %lld, \"estimated\": %zu, \"threads\": %d, \"converged\": %s, "
      "\"iterations\": %d, \"evaluations\": %d, \"gradients\": %d, \"ofv\": %.10g, "
      "\"fit_s\": %.6g, \"covariance_ok\": %s, \"covariance_s\": %.6g, \"total_s\": %.6g, "
      "\"fd_converged\": %s, \"fd_iterations\": %d, \"fd_evaluations\": %d, \"fd_ofv\": %.10g, "
      "\"fd_fit_s\": %.6g, \"evaluations_ratio\": %.6g}\n",
      o.fit.c_str(), static_cast<long long>(predictor.subjects()),
      static_cast<long long>(observations), estimated_parameters(p.spec).size(),
      resolve_threads(o.threads), fit.converged ? "true" : "false", fit.iterations, fit.evaluations,
      fit.gradients, fit.objective.ofv, fit_s, cov.ok ? "true" : "false", cov_s, fit_s + cov_s,
      fd_fit.converged ? "true" : "false", fd_fit.iterations, fd_fit.evaluations,
      fd_fit.objective.ofv, fd_s,
      static_cast<double>(fd_fit.evaluations) / static_cast<double>(fit.evaluations));
  out << buf;
}

}  // namespace pkscan::bench
