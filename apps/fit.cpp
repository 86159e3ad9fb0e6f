#include "fit.hpp"

#include <ceres/gradient_problem.h>
#include <ceres/gradient_problem_solver.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <pkscan/output/output.hpp>
#include <pkscan/pkscan.hpp>
#include <sstream>
#include <utility>

#include "options.hpp"
#include "population_fit.hpp"

namespace pkscan::cli {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const std::size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// "ka (or k01), k12, ..." for messages.
std::string parameter_list(const ModelInfo& m) {
  std::string s;
  for (const ParameterInfo& p : m.parameters) {
    if (!s.empty()) s += ", ";
    s += p.name;
    if (!p.alias.empty()) s += " (or " + p.alias + ")";
  }
  return s;
}

// Column of parameter `name` (canonical name or alias, any case). @throws InvalidArgument.
int column_of(const ModelInfo& m, const std::string& name, const char* flag) {
  const std::string n = lower(trim(name));
  const int col = n.empty() ? -1 : parameter_index(m, n);
  if (col < 0)
    throw InvalidArgument(std::string(flag) + ": \"" + trim(name) +
                          "\" is not a parameter of model " + m.name +
                          "; its parameters are: " + parameter_list(m));
  return col;
}

// A number: the whole text, finite. @throws InvalidArgument.
double parse_number(const std::string& text, const std::string& where) {
  const std::string t = trim(text);
  char* end = nullptr;
  const double v = t.empty() ? kNaN : std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v))
    throw InvalidArgument(where + " is \"" + t + "\", but must be a finite number");
  return v;
}

// name=value pairs of --init / --fix, by column, in the order given.
std::vector<std::pair<int, double>> parse_assignments(const ModelInfo& m,
                                                      const std::vector<std::string>& items,
                                                      const char* flag) {
  std::vector<std::pair<int, double>> out;
  for (const std::string& item : items) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw InvalidArgument(std::string(flag) + ": \"" + item +
                            "\" is not of the form name=value (for example cl=5)");
    const int col = column_of(m, item.substr(0, eq), flag);
    const std::string& name = m.parameters[static_cast<std::size_t>(col)].name;
    for (const auto& [c, v] : out)
      if (c == col) throw InvalidArgument(std::string(flag) + ": " + name + " is given twice");
    out.emplace_back(col, parse_number(item.substr(eq + 1), std::string(flag) + ": " + name));
  }
  return out;
}

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string number(double v) {
  if (std::isnan(v)) return {};
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// A CSV field: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

// Observed DV values of one subject (what Predictor::log_likelihood uses: EVID 0, MDV 0, DV
// present).
std::int64_t observed(const DatasetSubject& s) {
  std::int64_t n = 0;
  for (const DatasetRecord& r : s.records)
    if (r.evid == 0 && !r.mdv && !std::isnan(r.dv)) ++n;
  return n;
}

// The negative log-likelihood in the optimization variables x = (log p_estimated,
// log sigma if estimated), for one subject (subject_ >= 0) or pooled over all (subject_ < 0).
// Ceres calls Evaluate from one thread at a time per problem; the scratch buffers are mutable
// for that reason. A point where the likelihood cannot be evaluated (a DomainError from the
// predictor, a non-finite value) returns false, which Ceres's line search treats as a step to
// shorten; exceptions never cross Ceres.
class Objective final : public ceres::FirstOrderFunction {
 public:
  Objective(const Predictor& predictor, std::int64_t subject, const FitSetup& setup,
            Predictor::Workspace* ws, int threads)
      : predictor_(predictor),
        subject_(subject),
        setup_(setup),
        ws_(ws),
        threads_(threads),
        row_(setup.row),
        sigma_(setup.sigma),
        grad_(static_cast<std::size_t>(predictor.parameters()) *
              static_cast<std::size_t>(subject < 0 ? predictor.subjects() : 1)),
        sigma_grad_(setup.sigma.size()) {
    if (subject_ < 0)
      rows_.resize(static_cast<std::size_t>(predictor.parameters()) *
                   static_cast<std::size_t>(predictor.subjects()));
  }

  int NumParameters() const override { return setup_.variables(); }

  bool Evaluate(const double* x, double* cost, double* gradient) const override {
    const std::size_t k = setup_.estimated.size();
    for (std::size_t i = 0; i < k; ++i)
      row_[static_cast<std::size_t>(setup_.estimated[i])] = std::exp(x[i]);
    if (setup_.estimate_sigma)
      for (std::size_t j = 0; j < sigma_.size(); ++j) sigma_[j] = std::exp(x[k + j]);
    double* g = gradient ? grad_.data() : nullptr;
    double* sg = gradient && setup_.estimate_sigma ? sigma_grad_.data() : nullptr;
    double ll = kNaN;
    try {
      if (subject_ >= 0) {
        ll = predictor_.log_likelihood(subject_, row_.data(), setup_.error, sigma_.data(), g, sg,
                                       *ws_);
      } else {
        const std::size_t p = row_.size();
        for (std::size_t r = 0; r < rows_.size(); r += p)
          std::copy(row_.begin(), row_.end(), rows_.begin() + static_cast<std::ptrdiff_t>(r));
        ll = predictor_.log_likelihood_all(rows_.data(), setup_.error, sigma_.data(), nullptr, g,
                                           sg, threads_);
      }
    } catch (const Error&) {
      return false;
    }
    if (!std::isfinite(ll)) return false;
    *cost = -ll;
    if (gradient) {
      const std::size_t p = row_.size();
      for (std::size_t i = 0; i < k; ++i) {
        const std::size_t c = static_cast<std::size_t>(setup_.estimated[i]);
        double d = 0.0;  // d loglik / d p_c, summed over subjects when pooled
        for (std::size_t r = c; r < grad_.size(); r += p) d += grad_[r];
        gradient[i] = -d * row_[c];  // d(-loglik)/d log p = -p d loglik/dp
      }
      if (setup_.estimate_sigma)
        for (std::size_t j = 0; j < sigma_.size(); ++j)
          gradient[k + j] = -sigma_grad_[j] * sigma_[j];
      for (int i = 0; i < NumParameters(); ++i)
        if (!std::isfinite(gradient[i])) return false;
    }
    return true;
  }

 private:
  const Predictor& predictor_;
  std::int64_t subject_;
  const FitSetup& setup_;
  Predictor::Workspace* ws_;
  int threads_;
  mutable std::vector<double> row_;
  mutable std::vector<double> sigma_;
  mutable std::vector<double> rows_;  // pooled: the row repeated for every subject
  mutable std::vector<double> grad_;
  mutable std::vector<double> sigma_grad_;
};

FitOutcome solve(std::unique_ptr<Objective> objective, const FitSetup& setup,
                 std::int64_t observations) {
  FitOutcome out;
  out.observations = observations;
  const std::size_t k = setup.estimated.size();
  std::vector<double> x(static_cast<std::size_t>(setup.variables()));
  for (std::size_t i = 0; i < k; ++i)
    x[i] = std::log(setup.row[static_cast<std::size_t>(setup.estimated[i])]);
  if (setup.estimate_sigma)
    for (std::size_t j = 0; j < setup.sigma.size(); ++j) x[k + j] = std::log(setup.sigma[j]);

  const Objective* f = objective.get();
  ceres::GradientProblem problem(objective.release());  // takes ownership
  ceres::GradientProblemSolver::Options options;
  // Few variables: full BFGS (with the Wolfe line search it requires) converges in fewer
  // iterations than L-BFGS. Tolerances: relative change of -loglik 1e-12, gradient max-norm in
  // the log-parameters 1e-8 (-loglik is O(observations), so this is far below any change that
  // matters), relative step 1e-12.
  options.line_search_direction_type = ceres::BFGS;
  options.line_search_type = ceres::WOLFE;
  options.max_num_iterations = setup.max_iterations;
  options.function_tolerance = 1e-12;
  options.gradient_tolerance = 1e-8;
  options.parameter_tolerance = 1e-12;
  options.logging_type = ceres::SILENT;  // the library and the CLI print nothing from Ceres
  options.minimizer_progress_to_stdout = false;
  ceres::GradientProblemSolver::Summary summary;
  ceres::Solve(options, problem, x.data(), &summary);

  out.estimates.resize(k);
  for (std::size_t i = 0; i < k; ++i) out.estimates[i] = std::exp(x[i]);
  out.sigma = setup.sigma;
  if (setup.estimate_sigma)
    for (std::size_t j = 0; j < out.sigma.size(); ++j) out.sigma[j] = std::exp(x[k + j]);
  // -2LL at the parameters returned (evaluated again rather than read from the summary, so it
  // is NaN when even the start could not be evaluated).
  double cost = kNaN;
  out.minus2ll = f->Evaluate(x.data(), &cost, nullptr) ? 2.0 * cost : kNaN;
  out.iterations = summary.iterations.empty() ? 0 : static_cast<int>(summary.iterations.size()) - 1;
  out.message = summary.message;
  switch (summary.termination_type) {
    case ceres::CONVERGENCE:
    case ceres::USER_SUCCESS:
      out.status = "converged";
      break;
    case ceres::NO_CONVERGENCE:
      out.status = "max_iterations";
      break;
    default:
      out.status = "failed";
      break;
  }
  if (std::isnan(out.minus2ll)) out.status = "failed";
  return out;
}

// Checks the options against the model and dataset and builds the fitting problem.
FitSetup make_setup(const FitOptions& o, const ModelInfo& m, const Dataset& data) {
  FitSetup setup;
  const std::size_t np = m.parameters.size();
  auto name_of = [&](int col) -> const std::string& {
    return m.parameters[static_cast<std::size_t>(col)].name;
  };
  auto is_dataset_column = [&](int col) {
    return std::find(data.parameter_columns.begin(), data.parameter_columns.end(), name_of(col)) !=
           data.parameter_columns.end();
  };
  if (o.estimate.empty()) throw InvalidArgument("--estimate: no parameter to estimate");
  for (const std::string& name : o.estimate) {
    const int col = column_of(m, name, "--estimate");
    if (contains(setup.estimated, col))
      throw InvalidArgument("--estimate: " + name_of(col) + " is given twice");
    if (is_dataset_column(col))
      throw InvalidArgument("--estimate: " + name_of(col) +
                            " is a column of the dataset, whose values override the estimate "
                            "record by record; remove the column or do not estimate " +
                            name_of(col));
    setup.estimated.push_back(col);
  }
  const auto fixed = parse_assignments(m, o.fix, "--fix");
  const auto init = parse_assignments(m, o.init, "--init");

  setup.row.assign(np, kNaN);
  for (std::size_t c = 0; c < np; ++c) setup.row[c] = m.parameters[c].default_value;
  for (const auto& [col, v] : fixed) {
    if (contains(setup.estimated, col))
      throw InvalidArgument("--fix: " + name_of(col) +
                            " is also in --estimate; a parameter is either estimated or fixed");
    setup.row[static_cast<std::size_t>(col)] = v;
  }
  for (const auto& [col, v] : init) {
    if (!contains(setup.estimated, col))
      throw InvalidArgument("--init: " + name_of(col) +
                            " is not estimated (not in --estimate); give a fixed value with --fix");
    if (!(v > 0.0))
      throw InvalidArgument("--init: " + name_of(col) + " is " + format_value(v) +
                            ", but must be > 0 (estimated parameters are fitted on the log scale)");
    setup.row[static_cast<std::size_t>(col)] = v;
  }
  for (int col : setup.estimated) {
    const double v = setup.row[static_cast<std::size_t>(col)];
    if (std::isnan(v))
      throw InvalidArgument("--init: no initial value for " + name_of(col) +
                            " (it has no default); give --init " + name_of(col) + "=VALUE");
    if (!(v > 0.0))
      throw InvalidArgument("--init: the default initial value of " + name_of(col) + " is " +
                            format_value(v) +
                            ", but must be > 0 (estimated parameters are fitted on the log "
                            "scale); give --init " +
                            name_of(col) + "=VALUE");
  }
  // A parameter the dataset gives as a column needs no value here (a missing cell falls back to
  // the row; the predictor reports it then). Check the rest with the model's rules.
  std::vector<double> check = setup.row;
  for (std::size_t c = 0; c < np; ++c)
    if (std::isnan(check[c]) && !m.in_alternative[c] && is_dataset_column(static_cast<int>(c)))
      check[c] = 1.0;
  const std::string why = check_parameters(m, check.data());
  if (!why.empty())
    throw InvalidArgument("model " + m.name + ": " + why +
                          (why.find("missing") != std::string::npos
                               ? " (estimate it with --estimate or fix it with --fix)"
                               : ""));

  const std::string error = o.error.empty() ? (o.log_scale ? "additive" : "proportional") : o.error;
  try {
    setup.error.kind = error_model_from_string(error);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("--") + e.what());
  }
  if (o.log_scale && setup.error.kind != ErrorModelKind::Additive)
    throw InvalidArgument("--error is " + error +
                          ", but --log-scale fits log(DV) with an additive error "
                          "(give --error additive or leave --error out)");
  setup.error.log_scale = o.log_scale;
  const std::vector<std::string> sigma_names = setup.error.parameter_names();
  const std::size_t ns = static_cast<std::size_t>(setup.error.parameter_count());
  if (o.sigma.empty()) {
    setup.sigma.assign(ns, 0.1);
  } else {
    if (o.sigma.size() != ns) {
      std::string names;
      for (const std::string& n : sigma_names) names += (names.empty() ? "" : ",") + n;
      throw InvalidArgument("--sigma has " + std::to_string(o.sigma.size()) +
                            (o.sigma.size() == 1 ? " value" : " values") + ", but --error " +
                            error + " takes " + std::to_string(ns) + " (" + names + ")");
    }
    for (std::size_t j = 0; j < ns; ++j)
      if (!(std::isfinite(o.sigma[j]) && o.sigma[j] > 0.0))
        throw InvalidArgument("--sigma: " + sigma_names[j] + " is " + format_value(o.sigma[j]) +
                              ", but must be finite and > 0");
    setup.sigma = o.sigma;
  }
  setup.estimate_sigma = o.estimate_sigma;
  setup.max_iterations = o.max_iterations;
  return setup;
}

std::string plural(std::int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

CLI::App* add_fit_command(CLI::App& app, FitOptions& o) {
  CLI::App* fit = app.add_subcommand(
      "fit",
      "Estimate parameters by maximum likelihood from a NONMEM dataset (Ceres Solver), or a "
      "population model from a fit file (.yaml: FO, FOCE, FOCEI)");
  fit->add_option("dataset", o.dataset,
                  "NONMEM-format dataset (CSV) with DV, or a population fit file (.yaml)")
      ->required();
  fit->add_option("--model", o.model,
                  "two_compartment, three_compartment (default) or four_compartment");
  fit->add_option("--estimate", o.estimate,
                  "Parameters to estimate, comma-separated (e.g. ka,cl,v_central,q,v_peripheral); "
                  "required with a dataset")
      ->delimiter(',');
  fit->add_option("--init", o.init,
                  "Initial values of estimated parameters, name=value,... (default: the "
                  "model's default)")
      ->delimiter(',');
  fit->add_option("--fix", o.fix, "Fixed parameters, name=value,... (others: model defaults)")
      ->delimiter(',');
  fit->add_option("--error", o.error,
                  "Residual error: additive, proportional (default) or combined")
      ->check(CLI::IsMember({"additive", "proportional", "combined"}));
  fit->add_option("--sigma", o.sigma,
                  "Error standard deviation(s), sigma_add and/or sigma_prop (default 0.1 each); "
                  "initial values with --estimate-sigma")
      ->delimiter(',');
  fit->add_flag("--estimate-sigma", o.estimate_sigma, "Estimate the sigma(s) too");
  fit->add_flag("--log-scale", o.log_scale,
                "Fit log(DV) around log(IPRED) with an additive error (log-normal DV)");
  fit->add_flag("--pooled", o.pooled, "One parameter set for all subjects (default: per subject)");
  fit->add_option("--output,-o", o.output, "Estimates CSV (.csv; default: the CSV on stdout)");
  add_threads_option(fit, o.threads);
  fit->add_option("--max-iterations", o.max_iterations, "BFGS iterations per fit (default 500)")
      ->check(CLI::Range(1, 1000000));
  fit->add_flag("--quiet,-q", o.quiet, "Print no summary line");
  return fit;
}

FitOutcome fit_subject(const Predictor& predictor, std::int64_t s, const FitSetup& setup,
                       Predictor::Workspace& ws) {
  const std::int64_t n = observed(predictor.dataset().subjects[static_cast<std::size_t>(s)]);
  if (n == 0) {
    FitOutcome out;
    out.estimates.assign(setup.estimated.size(), kNaN);
    out.sigma = setup.sigma;
    if (setup.estimate_sigma) std::fill(out.sigma.begin(), out.sigma.end(), kNaN);
    out.minus2ll = kNaN;
    out.status = "no_observations";
    return out;
  }
  return solve(std::make_unique<Objective>(predictor, s, setup, &ws, 1), setup, n);
}

FitOutcome fit_pooled(const Predictor& predictor, const FitSetup& setup, int threads) {
  std::int64_t n = 0;
  for (const DatasetSubject& s : predictor.dataset().subjects) n += observed(s);
  return solve(std::make_unique<Objective>(predictor, -1, setup, nullptr, threads), setup, n);
}

int run_fit(const FitOptions& o, std::ostream& out, std::ostream& err) {
  if (is_fit_file(o.dataset)) {
    // A population fit file holds the whole problem: the per-subject fit's options do not apply.
    if (!o.model.empty() || !o.estimate.empty() || !o.init.empty() || !o.fix.empty() ||
        !o.error.empty() || !o.sigma.empty() || o.estimate_sigma || o.log_scale || o.pooled ||
        !o.output.empty())
      throw InvalidArgument(
          "a fit file gives the model, the parameters, the error and the output itself; only "
          "--threads and --quiet go with it");
    return run_population_fit(o.dataset, o.threads, o.quiet, out, err);
  }
  ModelKind kind = ModelKind::ThreeCompartment;
  try {
    kind = model_from_string(o.model.empty() ? std::string("three_compartment") : o.model);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("--model: ") + e.what());
  }
  const ModelInfo& m = model_info(kind);
  if (!o.output.empty()) {
    const std::string& p = o.output;
    if (p.size() < 4 || p.compare(p.size() - 4, 4, ".csv") != 0)
      throw InvalidArgument("--output: output path is \"" + p + "\", but must end in .csv");
  }
  Dataset data = read_dataset(o.dataset, m);
  const FitSetup setup = make_setup(o, m, data);
  std::unique_ptr<output::AtomicFile> file;
  if (!o.output.empty()) {
    // Before fitting: the estimates replace no input and can be committed there.
    try {
      output::check_output_not_input(o.output, {}, {{"the dataset", o.dataset}});
      output::check_output_unit(o.output, {});
      file = std::make_unique<output::AtomicFile>(o.output);
    } catch (const Error& e) {
      throw InvalidArgument(std::string("--output: ") + e.what());
    }
  }
  const Predictor predictor(std::move(data), kind);
  const std::int64_t subjects = predictor.subjects();
  const int threads = resolve_threads(o.threads);

  // Bad input shows at the start: evaluate every subject once there, so an invalid value (a
  // dataset parameter cell: predict throws; a non-positive DV with --log-scale: the likelihood
  // throws) is an error, not a failed fit (out of the domain the likelihood itself is -inf).
  auto at_start = [](const DomainError& e) {
    return DomainError(std::string("at the initial values: ") + e.what());
  };
  std::vector<FitOutcome> fits;
  if (o.pooled) {
    std::vector<double> rows;
    rows.reserve(setup.row.size() * static_cast<std::size_t>(subjects));
    for (std::int64_t s = 0; s < subjects; ++s)
      rows.insert(rows.end(), setup.row.begin(), setup.row.end());
    std::int64_t n = 0;
    for (const DatasetSubject& s : predictor.dataset().subjects) n += observed(s);
    if (n == 0)
      throw InvalidArgument(
          "the dataset has no observations with DV (EVID 0, MDV 0): nothing "
          "to fit");
    try {
      std::vector<double> pred(static_cast<std::size_t>(predictor.observations()));
      predictor.predict_all(rows.data(), pred.data(), threads);
      predictor.log_likelihood_all(rows.data(), setup.error, setup.sigma.data(), nullptr, nullptr,
                                   nullptr, threads);
    } catch (const DomainError& e) {
      throw at_start(e);
    }
    fits.push_back(fit_pooled(predictor, setup, threads));
  } else {
    {
      const auto ws = predictor.make_workspace();
      try {
        std::vector<double> pred;
        for (std::int64_t s = 0; s < subjects; ++s) {
          pred.resize(static_cast<std::size_t>(predictor.observations(s)));
          predictor.predict(s, setup.row.data(), pred.data(), *ws);
          predictor.log_likelihood(s, setup.row.data(), setup.error, setup.sigma.data(), nullptr,
                                   nullptr, *ws);
        }
      } catch (const DomainError& e) {
        throw at_start(e);
      }
    }
    fits.resize(static_cast<std::size_t>(subjects));
    // One workspace per worker, made by that worker on its first subject; the error of the
    // lowest failing subject is rethrown (pkscan/threads.hpp).
    std::vector<std::unique_ptr<Predictor::Workspace>> workspaces(
        static_cast<std::size_t>(threads));
    parallel_for(subjects, threads, [&](std::int64_t s, int worker) {
      std::unique_ptr<Predictor::Workspace>& ws = workspaces[static_cast<std::size_t>(worker)];
      if (!ws) ws = predictor.make_workspace();
      fits[static_cast<std::size_t>(s)] = fit_subject(predictor, s, setup, *ws);
    });
  }

  // The table: id, observations, estimates, sigmas, -2LL, status, iterations.
  std::string text = "id,observations";
  for (int col : setup.estimated) text += "," + m.parameters[static_cast<std::size_t>(col)].name;
  for (const std::string& n : setup.error.parameter_names()) text += "," + n;
  text += ",minus2ll,status,iterations\n";
  for (std::size_t i = 0; i < fits.size(); ++i) {
    const FitOutcome& f = fits[i];
    text += o.pooled ? std::string("pooled") : csv_field(predictor.dataset().subjects[i].id);
    text += "," + std::to_string(f.observations);
    for (double v : f.estimates) text += "," + number(v);
    for (double v : f.sigma) text += "," + number(v);
    text += "," + number(f.minus2ll) + "," + f.status + "," + std::to_string(f.iterations) + "\n";
  }
  if (file) {
    file->write(text.data(), text.size());
    file->commit();
  } else {
    out << text;
  }

  std::int64_t converged = 0, empty = 0;
  double total = 0.0;
  for (const FitOutcome& f : fits) {
    converged += f.converged() ? 1 : 0;
    empty += f.status == "no_observations" ? 1 : 0;
    if (!std::isnan(f.minus2ll)) total += f.minus2ll;
  }
  const std::int64_t fitted = static_cast<std::int64_t>(fits.size()) - empty;
  if (empty > 0)
    err << "pkscan: warning: " << plural(empty, "subject has", "subjects have")
        << " no observations with DV and " << (empty == 1 ? "was" : "were") << " not fitted\n";
  if (converged < fitted)
    err << "pkscan: warning: "
        << (o.pooled ? std::string("the pooled fit")
                     : std::to_string(fitted - converged) + " of " +
                           plural(fitted, "subject", "subjects"))
        << " did not converge (see the status column)\n";
  if (!o.quiet && file) {
    std::ostringstream s;
    s << "pkscan: " << (o.pooled ? "pooled fit of " : "fit ")
      << plural(subjects, "subject", "subjects") << " (" << m.name << ", "
      << plural(static_cast<std::int64_t>(setup.estimated.size()), "parameter", "parameters")
      << ", " << to_string(setup.error.kind) << (setup.error.log_scale ? " log-scale" : "")
      << " error" << (setup.estimate_sigma ? " estimated" : "") << "): ";
    if (o.pooled)
      s << fits[0].status << " after " << plural(fits[0].iterations, "iteration", "iterations")
        << ", " << fits[0].observations << " observations, -2LL " << format_value(total);
    else
      s << converged << " of " << fitted << " converged, -2LL sum " << format_value(total);
    s << "; wrote " << o.output << "\n";
    out << s.str();
  }
  return 0;
}

}  // namespace pkscan::cli
