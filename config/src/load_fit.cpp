// Population fit files (pkscan/config/fit_file.hpp; docs/run-files.md, "Fit files").
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <pkscan/config/fit_file.hpp>
#include <pkscan/error.hpp>
#include <string>
#include <vector>

#include "load_sections.hpp"

namespace pkscan::config {

namespace {

using detail::Loader;

constexpr std::streamsize kMaxFileBytes = 64 << 20;

bool is_dataset_column(const Dataset& data, const std::string& name) {
  for (const std::string& c : data.parameter_columns)
    if (c == name) return true;
  return false;
}

bool boolean(const Loader& L, const YAML::Node& v, const std::string& what) {
  const std::string s = L.scalar_string(v, what, "true or false");
  if (s == "true") return true;
  if (s == "false") return false;
  L.fail(v, what + " is \"" + s + "\", but must be true or false");
}

// `theta`: NAME: INIT or NAME: {init, lower, upper, fixed}.
void parse_theta(const Loader& L, const YAML::Node& node, const ModelInfo& m, const Dataset& data,
                 FitFile& fit) {
  if (!node.IsMap() || node.size() == 0)
    L.fail(node,
           "theta must be a mapping of parameter names to initial estimates, for example "
           "{ka: {init: 2, lower: 0}, v_central: 50}");
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    const std::string raw = L.scalar_string(key, "a key of theta", "a parameter name");
    const int col = parameter_index(m, raw);
    if (col < 0) L.fail(key, "theta: \"" + raw + "\" is not a parameter of model " + m.name);
    FitTheta t;
    t.name = m.parameters[static_cast<std::size_t>(col)].name;
    t.column = col;
    const std::string ctx = "theta." + t.name;
    for (const FitTheta& other : fit.theta)
      if (other.column == col) L.fail(key, ctx + " is given twice");
    if (is_dataset_column(data, t.name))
      L.fail(key, ctx + ": " + t.name +
                      " is a column of the dataset, whose values override THETA record by "
                      "record; remove the column or the theta");
    if (value.IsMap()) {
      const Loader::Entries e = L.entries(value, ctx, {"init", "lower", "upper", "fixed"});
      t.init = L.number(L.require(e, "init", value, ctx).value, ctx + ".init");
      if (auto f = e.find("lower"); f != e.end())
        t.lower = L.number(f->second.value, ctx + ".lower");
      if (auto f = e.find("upper"); f != e.end())
        t.upper = L.number(f->second.value, ctx + ".upper");
      if (auto f = e.find("fixed"); f != e.end())
        t.fixed = boolean(L, f->second.value, ctx + ".fixed");
      if (!std::isfinite(t.init)) L.fail(value, ctx + ".init must be a finite number");
      if (!(t.lower < t.upper))
        L.fail(value, ctx + ": lower (" + format_value(t.lower) + ") must be below upper (" +
                          format_value(t.upper) + ")");
      if (!t.fixed && !(t.lower < t.init && t.init < t.upper))
        L.fail(value, ctx + ".init is " + format_value(t.init) +
                          ", but must lie strictly between " + "lower and upper (" +
                          format_value(t.lower) + ", " + format_value(t.upper) + ")");
    } else {
      t.init = L.number(value, ctx);
      if (!std::isfinite(t.init)) L.fail(value, ctx + " must be a finite number");
    }
    fit.theta.push_back(t);
  }
}

// `iiv`: {block: [NAMES], omega: [LOWER TRIANGLE BY ROWS]} or {diagonal: [NAMES], omega: [..]}.
void parse_iiv(const Loader& L, const YAML::Node& node, const ModelInfo& m, FitFile& fit) {
  const Loader::Entries e = L.entries(node, "iiv", {"block", "diagonal", "omega", "fixed"});
  const bool block = e.count("block") > 0;
  fit.omega_block = block;
  if (auto it = e.find("fixed"); it != e.end())
    fit.omega_fixed = boolean(L, it->second.value, "iiv.fixed");
  if (block == (e.count("diagonal") > 0))
    L.fail(node, "iiv must have exactly one of block (a full OMEGA) and diagonal");
  const YAML::Node names = e.at(block ? "block" : "diagonal").value;
  const std::string what = std::string("iiv.") + (block ? "block" : "diagonal");
  if (!names.IsSequence() || names.size() == 0)
    L.fail(names, what + " must be a list of parameter names, for example [ka, v_central]");
  PopulationModel& pm = fit.population;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string raw = L.scalar_string(names[i], what + " entry", "a parameter name");
    const int col = parameter_index(m, raw);
    bool in_theta = false;
    for (const FitTheta& t : fit.theta) in_theta = in_theta || t.column == col;
    if (col < 0 || !in_theta)
      L.fail(names[i], what + ": \"" + raw +
                           "\" is not in theta; a parameter with variability is THETA * "
                           "exp(ETA) and needs its THETA there");
    for (int c : pm.eta_columns)
      if (c == col) L.fail(names[i], what + ": " + raw + " is given twice");
    pm.eta_columns.push_back(col);
  }
  const Eigen::Index q = static_cast<Eigen::Index>(pm.eta_columns.size());
  const YAML::Node omega = L.require(e, "omega", node, "iiv").value;
  const std::size_t want =
      block ? static_cast<std::size_t>(q * (q + 1) / 2) : static_cast<std::size_t>(q);
  if (!omega.IsSequence() || omega.size() != want)
    L.fail(omega, "iiv.omega must be a list of " + std::to_string(want) + " variances" +
                      (block ? " and covariances (the lower triangle by rows, as NONMEM's "
                               "$OMEGA BLOCK)"
                             : "") +
                      (omega.IsSequence() ? ", but has " + std::to_string(omega.size()) : ""));
  pm.omega = Eigen::MatrixXd::Zero(q, q);
  std::size_t k = 0;
  for (Eigen::Index r = 0; r < q; ++r)
    for (Eigen::Index c = 0; c <= r; ++c) {
      if (!block && c != r) continue;
      const double v = L.number(omega[k], "iiv.omega[" + std::to_string(k + 1) + "]");
      if (!std::isfinite(v) || (r == c && !(v > 0.0)))
        L.fail(omega[k], "iiv.omega[" + std::to_string(k + 1) + "] is " + format_value(v) +
                             ", but must be finite" + (r == c ? " and > 0 (a variance)" : ""));
      pm.omega(r, c) = pm.omega(c, r) = v;
      ++k;
    }
  if (Eigen::LLT<Eigen::MatrixXd>(pm.omega).info() != Eigen::Success)
    L.fail(omega, "iiv.omega is not positive definite (a covariance too large for its variances)");
}

// `covariates`: [{parameter, covariate, type, coefficient, reference | level}], the covariate a
// dataset column with one number per subject.
void parse_covariates(const Loader& L, const YAML::Node& node, const ModelInfo& m,
                      const Dataset& data, FitFile& fit) {
  if (!node.IsSequence())
    L.fail(node,
           "covariates must be a list of effects, for example [{parameter: cl, covariate: "
           "WT, type: power, coefficient: 0.75, reference: 70}]");
  for (std::size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    const std::string ctx = "covariates[" + std::to_string(i + 1) + "]";
    const Loader::Entries e = L.entries(
        item, ctx, {"parameter", "covariate", "type", "coefficient", "reference", "level"});
    ParameterEffect effect;
    const YAML::Node pn = L.require(e, "parameter", item, ctx).value;
    const std::string raw = L.scalar_string(pn, ctx + ".parameter", "a parameter name");
    effect.parameter = parameter_index(m, raw);
    bool in_theta = false;
    for (const FitTheta& t : fit.theta) in_theta = in_theta || t.column == effect.parameter;
    if (effect.parameter < 0 || !in_theta)
      L.fail(pn, ctx + ".parameter: \"" + raw +
                     "\" is not in theta; an effect scales the parameter's THETA");
    const YAML::Node cn = L.require(e, "covariate", item, ctx).value;
    effect.covariate = L.scalar_string(cn, ctx + ".covariate", "a column of the dataset");
    const YAML::Node tn = L.require(e, "type", item, ctx).value;
    const std::string type =
        L.scalar_string(tn, ctx + ".type", "power, exponential, linear or categorical");
    if (type == "power")
      effect.form = EffectForm::Power;
    else if (type == "exponential")
      effect.form = EffectForm::Exponential;
    else if (type == "linear")
      effect.form = EffectForm::Linear;
    else if (type == "categorical")
      effect.form = EffectForm::Categorical;
    else
      L.fail(tn, ctx + ".type is \"" + type +
                     "\", but must be power, exponential, linear or categorical");
    const YAML::Node bn = L.require(e, "coefficient", item, ctx).value;
    bool fixed = false;
    if (bn.IsMap()) {
      const Loader::Entries be = L.entries(bn, ctx + ".coefficient", {"init", "fixed"});
      effect.coefficient = L.number(L.require(be, "init", bn, ctx + ".coefficient").value,
                                    ctx + ".coefficient.init");
      if (auto f = be.find("fixed"); f != be.end())
        fixed = boolean(L, f->second.value, ctx + ".coefficient.fixed");
    } else {
      effect.coefficient = L.number(bn, ctx + ".coefficient");
    }
    if (!std::isfinite(effect.coefficient))
      L.fail(bn, ctx + ".coefficient must be a finite number");
    const bool categorical = effect.form == EffectForm::Categorical;
    const char* key = categorical ? "level" : "reference";
    const YAML::Node rn = L.require(e, key, item, ctx).value;
    (categorical ? effect.level : effect.reference) = L.number(rn, ctx + "." + key);
    if (!std::isfinite(categorical ? effect.level : effect.reference) ||
        (effect.form == EffectForm::Power && !(effect.reference > 0.0)))
      L.fail(rn, ctx + "." + key + " must be a finite number" +
                     (effect.form == EffectForm::Power ? " > 0" : ""));
    if (e.count(categorical ? "reference" : "level") > 0)
      L.fail(item, ctx + ": a " + type + " effect takes " + key + ", not " +
                       (categorical ? "reference" : "level"));
    // One number per subject from the dataset's column.
    try {
      effect.values = subject_covariate(data, effect.covariate);
    } catch (const InvalidArgument& err) {
      L.fail(cn, ctx + ".covariate: " + err.what());
    }
    if (!fixed) fit.effect_indices.push_back(static_cast<int>(fit.population.effects.size()));
    fit.effect_fixed.push_back(fixed);
    fit.population.effects.push_back(std::move(effect));
  }
}

// `error`: {proportional: V, additive: V, as: variance | standard_deviation}.
void parse_error(const Loader& L, const YAML::Node& node, FitFile& fit) {
  const Loader::Entries e = L.entries(node, "error", {"proportional", "additive", "as", "fixed"});
  if (auto it = e.find("fixed"); it != e.end())
    fit.sigma_fixed = boolean(L, it->second.value, "error.fixed");
  bool variance = true;
  if (auto it = e.find("as"); it != e.end()) {
    const std::string as = L.scalar_string(it->second.value, "error.as",
                                           "variance (NONMEM's $SIGMA) or standard_deviation");
    if (as == "standard_deviation")
      variance = false;
    else if (as != "variance")
      L.fail(it->second.value,
             "error.as is \"" + as + "\", but must be variance or standard_deviation");
  }
  for (const char* key : {"proportional", "additive"}) {
    auto it = e.find(key);
    if (it == e.end()) continue;
    const std::string what = std::string("error.") + key;
    const double v = L.finite(it->second.value, what, "finite and > 0", true);
    const double var = variance ? v : v * v;
    if (std::string(key) == "proportional") {
      fit.proportional = true;
      fit.population.sigma_proportional = var;
    } else {
      fit.additive = true;
      fit.population.sigma_additive = var;
    }
  }
  if (!fit.proportional && !fit.additive)
    L.fail(node, "error must give proportional, additive or both (NONMEM's $SIGMA)");
}

void parse_estimation(const Loader& L, const YAML::Node& node, FitFile& fit) {
  const Loader::Entries e =
      L.entries(node, "estimation", {"method", "max_evaluations", "covariance"});
  const YAML::Node method = L.require(e, "method", node, "estimation").value;
  const std::string name =
      L.scalar_string(method, "estimation.method", "fo, foce, focei or laplace");
  try {
    fit.method = estimation_method_from_string(name);
  } catch (const InvalidArgument&) {
    L.fail(method, "estimation.method is \"" + name + "\", but must be fo, foce, focei or laplace");
  }
  if (auto it = e.find("max_evaluations"); it != e.end())
    fit.max_evaluations =
        static_cast<int>(L.integer(it->second.value, "estimation.max_evaluations", 0, 100000000));
  if (auto it = e.find("covariance"); it != e.end()) {
    const std::string c =
        L.scalar_string(it->second.value, "estimation.covariance", "sandwich, r, s or none");
    if (c != "none") {
      try {
        fit.covariance = covariance_kind_from_string(c);
      } catch (const InvalidArgument&) {
        L.fail(it->second.value,
               "estimation.covariance is \"" + c + "\", but must be sandwich, r, s or none");
      }
    }
  }
}

}  // namespace

FitFile parse_fit_file(const std::string& text, const std::string& file) {
  using namespace detail;  // NOLINT(google-build-using-namespace)
  const Loader L(file);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    L.fail(e.mark, "YAML syntax error: " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull())
    throw ConfigError(file, 0, 0,
                      "the fit file is empty; it must be a YAML mapping with keys model, "
                      "dataset, theta, iiv, error, estimation, output");
  const Loader::Entries top = L.entries(
      root, "the fit file",
      {"model", "dataset", "theta", "covariates", "iiv", "error", "estimation", "output"});
  FitFile fit;
  fit.file = file;
  fit.model = parse_model(L, top);
  const ModelInfo& m = *fit.model;
  fit.inputs.push_back(output::InputFile{"the fit file", file});

  const YAML::Node dnode = L.require(top, "dataset", root, "the fit file").value;
  const std::string dpath =
      L.scalar_string(dnode, "dataset", "the path of a NONMEM-format CSV file");
  const std::string resolved = L.resolve(dpath);
  fit.dataset = std::make_shared<Dataset>(read_dataset(resolved, m));
  fit.inputs.push_back(output::InputFile{"dataset", resolved});

  const YAML::Node theta = L.require(top, "theta", root, "the fit file").value;
  parse_theta(L, theta, m, *fit.dataset, fit);
  PopulationModel& pm = fit.population;
  pm.theta_row.clear();
  for (const ParameterInfo& p : m.parameters) pm.theta_row.push_back(p.default_value);
  for (const FitTheta& t : fit.theta) pm.theta_row[static_cast<std::size_t>(t.column)] = t.init;
  // A parameter the dataset gives as a column needs no value here.
  std::vector<double> check = pm.theta_row;
  for (std::size_t c = 0; c < check.size(); ++c)
    if (std::isnan(check[c]) && !m.in_alternative[c] &&
        is_dataset_column(*fit.dataset, m.parameters[c].name))
      check[c] = 1.0;
  const std::string why = check_parameters(m, check.data());
  if (!why.empty()) L.fail(theta, "theta: model " + m.name + ": " + why);

  if (auto it = top.find("covariates"); it != top.end())
    parse_covariates(L, it->second.value, m, *fit.dataset, fit);
  parse_iiv(L, L.require(top, "iiv", root, "the fit file").value, m, fit);
  parse_error(L, L.require(top, "error", root, "the fit file").value, fit);
  parse_estimation(L, L.require(top, "estimation", root, "the fit file").value, fit);

  const YAML::Node onode = L.require(top, "output", root, "the fit file").value;
  const Loader::Entries oe = L.entries(onode, "output", {"path"});
  const YAML::Node pnode = L.require(oe, "path", onode, "output").value;
  const std::string path = L.scalar_string(pnode, "output.path", "a path ending in .csv");
  if (path.size() < 5 || path.compare(path.size() - 4, 4, ".csv") != 0)
    L.fail(pnode, "output.path is \"" + path + "\", but must end in .csv");
  fit.output_path = path;  // relative to the current directory, as a run file's output.path
  return fit;
}

FitFile load_fit_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ConfigError(path, 0, 0, std::string("cannot read the fit file: ") + std::strerror(errno));
  std::string text;
  char buf[65536];
  std::streamsize total = 0;
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    total += in.gcount();
    if (total > kMaxFileBytes)
      throw ConfigError(path, 0, 0,
                        "the fit file is larger than 64 MiB; a fit file is a page of YAML");
    text.append(buf, static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad())
    throw ConfigError(path, 0, 0, "cannot read the fit file (I/O error, or it is a directory)");
  return parse_fit_file(text, path);
}

}  // namespace pkscan::config
