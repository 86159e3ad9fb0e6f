// A population estimation as the program and Python run it (pkscan/estimation.hpp,
// estimate_population): objective or fit, covariance step, diagnostics.
#include <chrono>
#include <cmath>
#include <pkscan/error.hpp>
#include <pkscan/estimation.hpp>
#include <string>
#include <utility>

namespace pkscan {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

PopulationEstimate estimate_population(const Predictor& predictor, const PopulationFitSpec& spec,
                                       const EstimationOptions& options, int max_evaluations,
                                       std::optional<CovarianceKind> covariance) {
  if (max_evaluations < 0)
    throw InvalidArgument("population estimation: max_evaluations is " +
                          std::to_string(max_evaluations) + ", but must be >= 0");
  PopulationEstimate out;
  auto t0 = std::chrono::steady_clock::now();
  PopulationObjective start = population_objective(predictor, spec.initial, options);
  if (!start.finite()) {
    std::string who;
    for (std::size_t s = 0; s < start.subjects.size() && who.empty(); ++s)
      if (!std::isfinite(start.subjects[s].obji))
        who = " (first at subject ID " + predictor.dataset().subjects[s].id + ")";
    throw DomainError("the objective is not finite at the initial estimates" + who +
                      ": a prediction or residual variance there is not finite or not > 0");
  }
  out.estimates = spec.initial;
  out.fitted = max_evaluations > 0;
  if (out.fitted) {
    out.fit = fit_population(predictor, spec, options, max_evaluations);
    out.estimates = out.fit.estimates;
    out.objective = out.fit.objective;
  } else {
    out.objective = std::move(start);
  }
  out.estimation_seconds = seconds_since(t0);

  if (covariance && (!out.fitted || out.fit.converged)) {
    t0 = std::chrono::steady_clock::now();
    PopulationFitSpec at = spec;
    at.initial = out.estimates;
    out.covariance = covariance_step(predictor, at, options, *covariance);
    out.covariance_seconds = seconds_since(t0);
  }
  out.diagnostics = population_diagnostics(predictor, out.estimates, out.objective, options);
  return out;
}

}  // namespace pkscan
