#pragma once
// `pkscan fit`: maximum-likelihood estimation of model parameters from a NONMEM-format dataset
// with Ceres Solver (line-search BFGS on the exact gradients of pkscan::Predictor).
//
// The objective is the negative log-likelihood of the observed DV (Predictor::log_likelihood:
// the full Gaussian density, or the log-normal one with --log-scale). Every estimated model
// parameter is positive and estimated on the log scale (theta = log p), and so are estimated
// sigmas; the gradient with respect to theta is p * d(loglik)/dp, exact. Each subject is fitted
// on its own (default), in parallel over subjects, or one parameter set is fitted to all subjects
// at once (--pooled).
#include <cstdint>
#include <ostream>
#include <pkscan/predictor.hpp>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace pkscan::cli {

// What the command line gave (raw; checked by run_fit).
struct FitOptions {
  std::string dataset;                // NONMEM-format CSV, or a population fit file (.yaml, .yml)
  std::string model;                  // "" = three_compartment
  std::vector<std::string> estimate;  // parameter names (canonical or alias)
  std::vector<std::string> init;      // name=value: initial values of estimated parameters
  std::vector<std::string> fix;       // name=value: fixed parameters
  std::string error;                  // additive | proportional | combined ("" = default)
  std::vector<double> sigma;          // fixed sigmas, or initial ones with estimate_sigma
  bool estimate_sigma = false;
  bool log_scale = false;  // error model on log(DV) around log(IPRED)
  bool pooled = false;     // one parameter set for all subjects
  std::string output;      // estimates CSV; "" = the CSV goes to stdout
  int threads = 0;         // 0 = the default (pkscan/threads.hpp)
  int max_iterations = 500;
  bool quiet = false;
};

// Registers the `fit` subcommand and its options on `app`, storing into `options` (which must
// outlive the parse).
CLI::App* add_fit_command(CLI::App& app, FitOptions& options);

// A checked fitting problem: what is estimated, the fixed values, the error model.
struct FitSetup {
  std::vector<int> estimated;  // parameter columns estimated (ModelInfo::parameters order)
  std::vector<double> row;     // full parameter row; estimated columns hold the initial values
  ErrorModel error;            // residual error model
  std::vector<double> sigma;   // error.parameter_count() values: fixed, or initial values
  bool estimate_sigma = false;
  int max_iterations = 500;  // BFGS iterations
  // Number of free variables of the optimization (estimated parameters, plus sigmas).
  int variables() const noexcept {
    return static_cast<int>(estimated.size()) + (estimate_sigma ? error.parameter_count() : 0);
  }
};

// Result of one fit (one subject, or the pooled fit).
struct FitOutcome {
  std::int64_t observations = 0;  // observed DV values the fit used
  std::vector<double> estimates;  // FitSetup::estimated order; NaN when nothing was fitted
  std::vector<double> sigma;      // error-model parameters at the end (fixed or estimated)
  double minus2ll = 0.0;          // -2 log-likelihood at the estimates; NaN if not fitted
  // "converged" (Ceres CONVERGENCE), "max_iterations" (NO_CONVERGENCE), "failed" (Ceres gave
  // up, e.g. the line search could not make progress), "no_observations" (nothing to fit).
  std::string status;
  int iterations = 0;   // BFGS iterations
  std::string message;  // Ceres's termination message
  bool converged() const noexcept { return status == "converged"; }
};

// Fits subject `s` (0-based) of `predictor` by maximum likelihood, starting at setup.row /
// setup.sigma. Uses `ws` (not shared with other threads). Never throws for numerical trouble:
// a point where the likelihood cannot be evaluated is rejected by the line search, and a start
// where it cannot be evaluated gives status "failed".
FitOutcome fit_subject(const Predictor& predictor, std::int64_t s, const FitSetup& setup,
                       Predictor::Workspace& ws);

// Fits one parameter set to all subjects (the log-likelihoods summed) on `threads` threads.
FitOutcome fit_pooled(const Predictor& predictor, const FitSetup& setup, int threads);

// Runs `pkscan fit`: reads the dataset, checks the options, fits, writes the estimates CSV
// (to options.output, or stdout) and a one-line summary on stdout. Returns the exit status.
// @throws pkscan::Error for bad input (mapped to exit statuses by run_cli).
int run_fit(const FitOptions& options, std::ostream& out, std::ostream& err);

}  // namespace pkscan::cli
