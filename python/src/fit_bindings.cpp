// pkscan.fit: population estimation (FO, FOCE, FOCEI) with a covariance step and NONMEM's
// diagnostics, through the library's pkscan::estimate_population (as `pkscan fit FILE.yaml` runs
// it), from the keys of a fit file given as Python values. pkscan/__init__.py wraps the dict this
// returns in a FitResult.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"

namespace pkscan::python {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr const char* kFitDoc = R"doc(
Population estimation: NONMEM's FO, FOCE or FOCEI objective, its minimum over THETA, OMEGA and
SIGMA, a covariance step and NONMEM's diagnostics, as `pkscan fit FILE.yaml` runs a fit file
(docs/run-files.md, "Fit files"); the arguments are that file's keys.

model: a Model or a built-in model's name. dataset: a Dataset (of that model), a path, or CSV
text. theta: {name: value} (estimated without bounds) or {name: {'init', 'lower', 'upper',
'fixed'}}; parameters not named keep the model's defaults. iiv: {'block': [names], 'omega':
[lower triangle by rows]} or {'diagonal': [names], 'omega': [variances]} (P = THETA * exp(ETA);
'fixed': True holds OMEGA), or {name: variance}. error: {'proportional': v, 'additive': v,
'as': 'variance' (NONMEM's $SIGMA, the default) or 'standard_deviation', 'fixed': bool}.
estimation: {'method': 'fo' | 'foce' | 'focei' (default) | 'laplace', 'covariance': 'sandwich' | 'r' | 's'
| 'none' (default), 'max_evaluations': int (default 10000; 0 evaluates at the estimates
given)}. covariates: [{'parameter', 'covariate' (a dataset column, one value per subject),
'type': 'power' | 'exponential' | 'linear' | 'categorical', 'coefficient': number (estimated)
or {'init', 'fixed'}, 'reference' (or 'level' for categorical)}]. threads: 0 for the process
default.

Returns a FitResult. Raises ValueError for bad input (as the fit file's loader) and when the
objective is not finite at the initial estimates. A fit that does not converge is returned with
converged False. The GIL is released while the estimation runs.
)doc";

double number(py::handle h, const std::string& what) {
  try {
    return py::cast<double>(h);
  } catch (const py::cast_error&) {
    throw InvalidArgument(what + " must be a number");
  }
}

bool flag(const py::dict& d, const char* key, const std::string& what) {
  if (!d.contains(key)) return false;
  try {
    return py::cast<bool>(d[key]);
  } catch (const py::cast_error&) {
    throw InvalidArgument(what + "." + key + " must be True or False");
  }
}

void only_keys(const py::dict& d, const std::string& what, const std::vector<std::string>& keys) {
  for (const auto& item : d) {
    const std::string k = py::str(item.first);
    bool known = false;
    for (const std::string& a : keys) known = known || a == k;
    if (!known)
      throw InvalidArgument(what + ": unknown key \"" + k + "\" (keys: " + join_names(keys) + ")");
  }
}

py::dict as_dict(py::handle h, const std::string& what) {
  if (!py::isinstance<py::dict>(h)) throw InvalidArgument(what + " must be a dict");
  return py::reinterpret_borrow<py::dict>(h);
}

int column_of(const ModelInfo& m, const std::string& name, const std::string& what) {
  const int c = parameter_index(m, name);
  if (c < 0)
    throw InvalidArgument(what + ": \"" + name + "\" is not a parameter of model " + m.name);
  return c;
}

struct Names {
  std::vector<std::string> theta;  // canonical names, in the order given
  std::vector<bool> theta_fixed;
  std::vector<bool> effect_fixed;  // per covariate effect
};

PopulationFitSpec read_spec(const ModelInfo& m, const Dataset& data, py::handle theta,
                            py::handle covariates, py::handle iiv, py::handle error,
                            bool& proportional, bool& additive, Names& names) {
  PopulationFitSpec spec;
  PopulationModel& pm = spec.initial;
  for (const ParameterInfo& p : m.parameters) pm.theta_row.push_back(p.default_value);
  const py::dict th = as_dict(theta, "theta");
  if (th.empty()) throw InvalidArgument("theta must name at least one parameter");
  for (const auto& item : th) {
    const std::string raw = py::str(item.first);
    const int c = column_of(m, raw, "theta");
    const std::string name = m.parameters[static_cast<std::size_t>(c)].name;
    const std::string ctx = "theta." + name;
    for (const std::string& n : names.theta)
      if (n == name) throw InvalidArgument(ctx + " is given twice");
    for (const std::string& col : data.parameter_columns)
      if (col == name)
        throw InvalidArgument(ctx + ": " + name +
                              " is a column of the dataset, whose values override THETA record "
                              "by record; remove the column or the theta");
    double init = 0.0, lower = -kInf, upper = kInf;
    bool fixed = false;
    if (py::isinstance<py::dict>(item.second)) {
      const py::dict e = py::reinterpret_borrow<py::dict>(item.second);
      only_keys(e, ctx, {"init", "lower", "upper", "fixed"});
      if (!e.contains("init")) throw InvalidArgument(ctx + " needs 'init'");
      init = number(e["init"], ctx + ".init");
      if (e.contains("lower")) lower = number(e["lower"], ctx + ".lower");
      if (e.contains("upper")) upper = number(e["upper"], ctx + ".upper");
      fixed = flag(e, "fixed", ctx);
    } else {
      init = number(item.second, ctx);
    }
    if (!std::isfinite(init)) throw InvalidArgument(ctx + " must be a finite number");
    pm.theta_row[static_cast<std::size_t>(c)] = init;
    names.theta.push_back(name);
    names.theta_fixed.push_back(fixed);
    if (!fixed) {
      spec.theta_columns.push_back(c);
      spec.theta_lower.push_back(lower);
      spec.theta_upper.push_back(upper);
    }
  }
  std::vector<double> check = pm.theta_row;
  for (std::size_t c = 0; c < check.size(); ++c)
    for (const std::string& col : data.parameter_columns)
      if (std::isnan(check[c]) && !m.in_alternative[c] && col == m.parameters[c].name)
        check[c] = 1.0;
  const std::string why = check_parameters(m, check.data());
  if (!why.empty()) throw InvalidArgument("theta: model " + m.name + ": " + why);

  // covariates: [{parameter, covariate, type, coefficient, reference | level}]
  if (!covariates.is_none()) {
    if (!py::isinstance<py::list>(covariates) && !py::isinstance<py::tuple>(covariates))
      throw InvalidArgument("covariates must be a list of dicts");
    int i = 0;
    for (py::handle item : covariates) {
      const std::string ctx = "covariates[" + std::to_string(++i) + "]";
      const py::dict e = as_dict(item, ctx);
      only_keys(e, ctx, {"parameter", "covariate", "type", "coefficient", "reference", "level"});
      for (const char* key : {"parameter", "covariate", "type", "coefficient"})
        if (!e.contains(key)) throw InvalidArgument(ctx + " needs '" + key + "'");
      ParameterEffect effect;
      const std::string name = py::str(e["parameter"]);
      effect.parameter = column_of(m, name, ctx + ".parameter");
      bool in_theta = false;
      for (const std::string& t : names.theta)
        in_theta = in_theta || t == m.parameters[static_cast<std::size_t>(effect.parameter)].name;
      if (!in_theta)
        throw InvalidArgument(ctx + ".parameter: \"" + name +
                              "\" is not in theta; an effect scales the parameter's THETA");
      effect.covariate = py::str(e["covariate"]);
      const std::string type = py::str(e["type"]);
      const EffectForm forms[] = {EffectForm::Power, EffectForm::Exponential, EffectForm::Linear,
                                  EffectForm::Categorical};
      bool known = false;
      for (EffectForm f : forms)
        if (to_string(f) == type) {
          effect.form = f;
          known = true;
        }
      if (!known)
        throw InvalidArgument(ctx + ".type is \"" + type +
                              "\", but must be power, exponential, linear or categorical");
      bool fixed = false;
      if (py::isinstance<py::dict>(e["coefficient"])) {
        const py::dict b = py::reinterpret_borrow<py::dict>(e["coefficient"]);
        only_keys(b, ctx + ".coefficient", {"init", "fixed"});
        if (!b.contains("init")) throw InvalidArgument(ctx + ".coefficient needs 'init'");
        effect.coefficient = number(b["init"], ctx + ".coefficient.init");
        fixed = flag(b, "fixed", ctx + ".coefficient");
      } else {
        effect.coefficient = number(e["coefficient"], ctx + ".coefficient");
      }
      const bool categorical = effect.form == EffectForm::Categorical;
      const char* key = categorical ? "level" : "reference";
      if (!e.contains(key) || e.contains(categorical ? "reference" : "level"))
        throw InvalidArgument(ctx + ": a " + type + " effect takes '" + key + "'");
      (categorical ? effect.level : effect.reference) = number(e[key], ctx + "." + key);
      try {
        effect.values = subject_covariate(data, effect.covariate);
      } catch (const InvalidArgument& err) {
        throw InvalidArgument(ctx + ".covariate: " + err.what());
      }
      if (!fixed) spec.effect_indices.push_back(static_cast<int>(pm.effects.size()));
      names.effect_fixed.push_back(fixed);
      pm.effects.push_back(std::move(effect));
    }
  }

  // iiv
  const py::dict iv = as_dict(iiv, "iiv");
  std::vector<double> values;
  if (iv.contains("block") || iv.contains("diagonal")) {
    only_keys(iv, "iiv", {"block", "diagonal", "omega", "fixed"});
    spec.omega_block = iv.contains("block");
    if (spec.omega_block == iv.contains("diagonal"))
      throw InvalidArgument("iiv must have exactly one of 'block' (a full OMEGA) and 'diagonal'");
    spec.estimate_omega = !flag(iv, "fixed", "iiv");
    for (py::handle n : iv[spec.omega_block ? "block" : "diagonal"])
      pm.eta_columns.push_back(column_of(m, py::str(n), "iiv"));
    if (!iv.contains("omega")) throw InvalidArgument("iiv needs 'omega'");
    for (py::handle v : iv["omega"]) values.push_back(number(v, "iiv.omega"));
  } else {
    for (const auto& item : iv) {
      pm.eta_columns.push_back(column_of(m, py::str(item.first), "iiv"));
      values.push_back(number(item.second, "iiv." + std::string(py::str(item.first))));
    }
  }
  const Eigen::Index q = static_cast<Eigen::Index>(pm.eta_columns.size());
  if (q == 0) throw InvalidArgument("iiv must name at least one parameter");
  for (int c : pm.eta_columns) {
    bool in_theta = false;
    for (int t = 0; t < static_cast<int>(names.theta.size()); ++t)
      in_theta = in_theta || names.theta[static_cast<std::size_t>(t)] ==
                                 m.parameters[static_cast<std::size_t>(c)].name;
    if (!in_theta)
      throw InvalidArgument("iiv: " + m.parameters[static_cast<std::size_t>(c)].name +
                            " is not in theta; a parameter with variability is THETA * exp(ETA) "
                            "and needs its THETA there");
  }
  const std::size_t want =
      spec.omega_block ? static_cast<std::size_t>(q * (q + 1) / 2) : static_cast<std::size_t>(q);
  if (values.size() != want)
    throw InvalidArgument("iiv.omega must have " + std::to_string(want) + " values, but has " +
                          std::to_string(values.size()));
  pm.omega = Eigen::MatrixXd::Zero(q, q);
  std::size_t k = 0;
  for (Eigen::Index r = 0; r < q; ++r)
    for (Eigen::Index c = 0; c <= r; ++c)
      if (spec.omega_block || r == c) pm.omega(r, c) = pm.omega(c, r) = values[k++];

  // error
  const py::dict er = as_dict(error, "error");
  only_keys(er, "error", {"proportional", "additive", "as", "fixed"});
  bool variance = true;
  if (er.contains("as")) {
    const std::string as = py::str(er["as"]);
    if (as == "standard_deviation")
      variance = false;
    else if (as != "variance")
      throw InvalidArgument("error.as is \"" + as +
                            "\", but must be variance or standard_deviation");
  }
  spec.estimate_sigma = !flag(er, "fixed", "error");
  proportional = er.contains("proportional");
  additive = er.contains("additive");
  if (!proportional && !additive)
    throw InvalidArgument("error must give proportional, additive or both (NONMEM's $SIGMA)");
  for (const char* key : {"proportional", "additive"}) {
    if (!er.contains(key)) continue;
    const double v = number(er[key], std::string("error.") + key);
    if (!(std::isfinite(v) && v > 0.0))
      throw InvalidArgument(std::string("error.") + key + " is " + format_value(v) +
                            ", but must be finite and > 0");
    (std::string(key) == "proportional" ? pm.sigma_proportional : pm.sigma_additive) =
        variance ? v : v * v;
  }
  return spec;
}

py::array_t<double> vector_array(const std::vector<double>& v) {
  py::array_t<double> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

py::array_t<double> matrix_array(const Eigen::MatrixXd& m) {
  py::array_t<double> a({static_cast<py::ssize_t>(m.rows()), static_cast<py::ssize_t>(m.cols())});
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) a.mutable_at(r, c) = m(r, c);
  return a;
}

py::dict fit_py(py::handle model, py::handle dataset, py::handle theta, py::handle iiv,
                py::handle error, py::handle estimation, py::handle covariates, int threads) {
  const PyDataset d = load_dataset(dataset, model);
  const ModelInfo& m = *d.model;
  bool proportional = false, additive = false;
  Names names;
  const PopulationFitSpec spec =
      read_spec(m, *d.data, theta, covariates, iiv, error, proportional, additive, names);
  EstimationOptions options;
  options.threads = threads;
  int max_evaluations = 10000;
  std::optional<CovarianceKind> covariance;
  if (!estimation.is_none()) {
    const py::dict es = as_dict(estimation, "estimation");
    only_keys(es, "estimation", {"method", "covariance", "max_evaluations"});
    if (es.contains("method"))
      options.method = estimation_method_from_string(std::string(py::str(es["method"])));
    if (es.contains("max_evaluations")) {
      try {
        max_evaluations = py::cast<int>(es["max_evaluations"]);
      } catch (const py::cast_error&) {
        throw InvalidArgument("estimation.max_evaluations must be an integer >= 0");
      }
    }
    if (es.contains("covariance")) {
      const std::string c = py::str(es["covariance"]);
      if (c != "none") covariance = covariance_kind_from_string(c);
    }
  }
  const Predictor predictor(*d.data, d.model);
  PopulationEstimate est;
  {
    py::gil_scoped_release release;
    est = estimate_population(predictor, spec, options, max_evaluations, covariance);
  }

  // Rows named as in the estimates file: theta.<name>, omega.<row>.<col>, sigma.<part>.
  const PopulationModel& pm = est.estimates;
  const int q = static_cast<int>(pm.eta_columns.size());
  auto eta_name = [&](int k) {
    return m.parameters[static_cast<std::size_t>(pm.eta_columns[static_cast<std::size_t>(k)])].name;
  };
  py::dict estimates, fixed;
  for (std::size_t t = 0; t < names.theta.size(); ++t) {
    const std::string& n = names.theta[t];
    estimates[py::str("theta." + n)] =
        pm.theta_row[static_cast<std::size_t>(parameter_index(m, n))];
    fixed[py::str("theta." + n)] = static_cast<bool>(names.theta_fixed[t]);
  }
  for (std::size_t e = 0; e < pm.effects.size(); ++e) {
    const std::string n = estimated_parameter_name(
        m, pm, {EstimatedParameter::Kind::Effect, static_cast<int>(e), 0, 0.0});
    estimates[py::str(n)] = pm.effects[e].coefficient;
    fixed[py::str(n)] = static_cast<bool>(names.effect_fixed[e]);
  }
  for (int i = 0; i < q; ++i)
    for (int j = 0; j <= i; ++j)
      if (i == j || spec.omega_block) {
        const std::string n = "omega." + eta_name(i) + "." + eta_name(j);
        estimates[py::str(n)] = pm.omega(i, j);
        fixed[py::str(n)] = !spec.estimate_omega;
      }
  if (proportional) {
    estimates["sigma.proportional"] = pm.sigma_proportional;
    fixed["sigma.proportional"] = !spec.estimate_sigma;
  }
  if (additive) {
    estimates["sigma.additive"] = pm.sigma_additive;
    fixed["sigma.additive"] = !spec.estimate_sigma;
  }

  py::dict out;
  out["method"] = to_string(options.method);
  out["ofv"] = est.objective.ofv;
  out["estimates"] = estimates;
  out["fixed"] = fixed;
  out["fitted"] = est.fitted;
  out["converged"] = est.fitted ? est.fit.converged : true;
  out["iterations"] = est.fit.iterations;
  out["evaluations"] = est.fitted ? est.fit.evaluations : 1;
  out["message"] = est.fitted ? est.fit.message : std::string("evaluated at the estimates given");
  out["seconds"] = est.estimation_seconds;

  py::list eta_names;
  for (int k = 0; k < q; ++k) eta_names.append("eta_" + eta_name(k));
  out["eta_names"] = eta_names;
  const PopulationDiagnostics& g = est.diagnostics;
  py::dict shrinkage;
  for (int k = 0; k < q; ++k)
    shrinkage[py::str("omega." + eta_name(k) + "." + eta_name(k))] =
        g.eta_shrinkage[static_cast<std::size_t>(k)];
  shrinkage["eps"] = g.eps_shrinkage;
  out["shrinkage"] = shrinkage;

  // Per subject.
  const std::size_t ns = est.objective.subjects.size();
  py::array_t<double> eta({static_cast<py::ssize_t>(ns), static_cast<py::ssize_t>(q)});
  std::vector<double> obji;
  py::list status;
  for (std::size_t s = 0; s < ns; ++s) {
    const SubjectObjective& so = est.objective.subjects[s];
    for (int k = 0; k < q; ++k)
      eta.mutable_at(static_cast<py::ssize_t>(s), k) = so.eta[static_cast<std::size_t>(k)];
    obji.push_back(so.obji);
    status.append(to_string(so.status));
  }
  py::dict subjects;
  subjects["id"] = dataset_ids(*d.data);
  subjects["eta"] = eta;
  subjects["obji"] = vector_array(obji);
  subjects["status"] = status;
  out["subjects"] = subjects;

  // Per observation.
  py::dict table;
  py::list ids;
  for (std::size_t i = 0; i < g.subject.size(); ++i) {
    ids.append(d.data->subjects[static_cast<std::size_t>(g.subject[i])].id);
  }
  table["id"] = ids;
  py::array_t<std::int64_t> lines(static_cast<py::ssize_t>(g.line.size()));
  std::copy(g.line.begin(), g.line.end(), lines.mutable_data());
  table["line"] = lines;
  const std::pair<const char*, const std::vector<double>*> cols[] = {
      {"time", &g.time},     {"dv", &g.dv},      {"pred", &g.pred}, {"ipred", &g.ipred},
      {"res", &g.res},       {"ires", &g.ires},  {"wres", &g.wres}, {"cwres", &g.cwres},
      {"cwresi", &g.cwresi}, {"iwres", &g.iwres}};
  for (const auto& [name, col] : cols) table[name] = vector_array(*col);
  out["table"] = table;

  py::list history;
  for (const FitIteration& it : est.fit.history) {
    py::dict h;
    h["iteration"] = it.iteration;
    h["ofv"] = it.ofv;
    history.append(h);
  }
  out["history"] = history;

  // The covariance step.
  out["covariance_ok"] = py::none();
  if (est.covariance) {
    const CovarianceStep& c = *est.covariance;
    out["covariance_ok"] = c.ok;
    out["covariance_message"] = c.message;
    out["covariance_seconds"] = est.covariance_seconds;
    if (c.ok) {
      py::list order;
      py::dict se;
      for (std::size_t i = 0; i < c.parameters.size(); ++i) {
        const std::string n = estimated_parameter_name(m, pm, c.parameters[i]);
        order.append(n);
        se[py::str(n)] = c.se(static_cast<Eigen::Index>(i));
      }
      out["covariance_names"] = order;
      out["se"] = se;
      out["covariance"] = matrix_array(c.covariance);
      out["correlation"] = matrix_array(c.correlation);
      out["condition_number"] = c.condition_number;
    }
  }
  return out;
}

}  // namespace

void bind_fit(py::module_& m) {
  m.def("_fit", &fit_py, py::arg("model"), py::arg("dataset"), py::arg("theta"), py::arg("iiv"),
        py::arg("error"), py::arg("estimation") = py::none(), py::arg("covariates") = py::none(),
        py::arg("threads") = 0, kFitDoc);
}

}  // namespace pkscan::python
