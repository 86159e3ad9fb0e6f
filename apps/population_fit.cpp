#include "population_fit.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <pkscan/config/fit_file.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

#include "cli.hpp"

namespace pkscan::cli {

namespace {

// The shortest text that reads back as the same double.
std::string number(double v) {
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

// Lines of `text` without their line breaks.
std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t b = 0;
  for (std::size_t e; (e = text.find('\n', b)) != std::string::npos; b = e + 1)
    lines.push_back(text.substr(b, e - b));
  return lines;
}

// The comma-separated fields of a line this file wrote (names hold no comma or quote).
std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> f;
  std::size_t b = 0;
  for (std::size_t e; (e = line.find(',', b)) != std::string::npos; b = e + 1)
    f.push_back(line.substr(b, e - b));
  f.push_back(line.substr(b));
  return f;
}

// "theo_fit.csv" -> "theo_fit" + suffix
std::string companion(const std::string& main, const std::string& suffix) {
  return main.substr(0, main.size() - 4) + suffix;
}

// A NONMEM .ext value field (Fortran E12.5 in 13 columns).
std::string ext_value(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%13.5E", v);
  return buf;
}

// The .ext table (NONMEM's format: a title line, a header, a row per iteration, then the
// final estimates, the standard errors, the eigenvalues and condition number of the
// correlation matrix, the SD/correlation form and the fixed flags, under NONMEM's negative
// iteration numbers).
std::string ext_table(const config::FitFile& fit, const PopulationEstimate& est,
                      const std::map<std::string, double>& se) {
  const ModelInfo& m = *fit.model;
  const PopulationModel& pm = est.estimates;
  const int q = static_cast<int>(pm.eta_columns.size());
  const int ns = (fit.proportional ? 1 : 0) + (fit.additive ? 1 : 0);
  auto eta_name = [&](int k) {
    return m.parameters[static_cast<std::size_t>(pm.eta_columns[static_cast<std::size_t>(k)])].name;
  };
  // One column: its name, its value in a model, its row name in `se` (empty: not estimated),
  // fixed, and whether it is a covariance (SD/correlation form).
  struct Column {
    std::string header;
    std::function<double(const PopulationModel&)> value;
    std::string se_name;
    bool fixed;
    int var_i = -1, var_j = -1;  // OMEGA/SIGMA element (i, j), -1 for THETA
    bool sigma = false;
  };
  std::vector<Column> cols;
  for (std::size_t t = 0; t < fit.theta.size(); ++t) {
    const config::FitTheta& th = fit.theta[t];
    cols.push_back({"THETA" + std::to_string(t + 1),
                    [c = th.column](const PopulationModel& x) {
                      return x.theta_row[static_cast<std::size_t>(c)];
                    },
                    th.fixed ? "" : "theta." + th.name, th.fixed});
  }
  // The effects' coefficients are THETAs too in NONMEM, after the parameters'.
  for (std::size_t e = 0; e < pm.effects.size(); ++e) {
    const bool fixed = fit.effect_fixed[e];
    const std::string n = estimated_parameter_name(
        m, pm, {EstimatedParameter::Kind::Effect, static_cast<int>(e), 0, 0.0});
    cols.push_back({"THETA" + std::to_string(fit.theta.size() + e + 1),
                    [e](const PopulationModel& x) { return x.effects[e].coefficient; },
                    fixed ? "" : n, fixed});
  }
  // SIGMA: the proportional part first (NONMEM's Y = F + F*EPS(1) + EPS(2)).
  std::vector<std::pair<std::string, double PopulationModel::*>> sig;
  if (fit.proportional)
    sig.emplace_back("sigma.proportional", &PopulationModel::sigma_proportional);
  if (fit.additive) sig.emplace_back("sigma.additive", &PopulationModel::sigma_additive);
  for (int i = 0; i < ns; ++i)
    for (int j = 0; j <= i; ++j) {
      Column c{"SIGMA(" + std::to_string(i + 1) + "," + std::to_string(j + 1) + ")",
               [](const PopulationModel&) { return 0.0; },
               "",
               true,
               i,
               j,
               true};
      if (i == j) {
        const auto member = sig[static_cast<std::size_t>(i)].second;
        c.value = [member](const PopulationModel& x) { return x.*member; };
        c.fixed = fit.sigma_fixed;
        c.se_name = fit.sigma_fixed ? "" : sig[static_cast<std::size_t>(i)].first;
      }
      cols.push_back(c);
    }
  for (int i = 0; i < q; ++i)
    for (int j = 0; j <= i; ++j) {
      const bool estimated = (i == j || fit.omega_block) && !fit.omega_fixed;
      cols.push_back({"OMEGA(" + std::to_string(i + 1) + "," + std::to_string(j + 1) + ")",
                      [i, j](const PopulationModel& x) { return x.omega(i, j); },
                      estimated ? "omega." + eta_name(i) + "." + eta_name(j) : "", !estimated, i,
                      j});
    }

  std::string method;
  switch (fit.method) {
    case EstimationMethod::Fo:
      method = "First Order";
      break;
    case EstimationMethod::Foce:
      method = "First Order Conditional Estimation";
      break;
    case EstimationMethod::Focei:
      method = "First Order Conditional Estimation with Interaction";
      break;
    case EstimationMethod::Laplace:
      method = "Laplacian Conditional Estimation with Interaction";
      break;
  }
  std::string text = "TABLE NO.     1: " + method +
                     ": Goal Function=MINIMUM VALUE OF OBJECTIVE FUNCTION: Problem=1 "
                     "Subproblem=0 Superproblem1=0 Iteration1=0 Superproblem2=0 Iteration2=0\n";
  text += " ITERATION   ";
  char buf[64];
  for (const Column& c : cols) {
    std::snprintf(buf, sizeof buf, " %-12s", c.header.c_str());
    text += buf;
  }
  text += " OBJ\n";
  auto row = [&](long long iteration, const std::function<double(const Column&)>& value,
                 double obj) {
    std::snprintf(buf, sizeof buf, "%13lld", iteration);
    text += buf;
    for (const Column& c : cols) text += ext_value(value(c));
    if (obj == 0.0)
      text += "    0.0000000000000000\n";  // as NONMEM writes the rows that have no objective
    else {
      std::snprintf(buf, sizeof buf, "%22.17g", obj);
      text += std::string(buf) + "\n";
    }
  };
  std::vector<FitIteration> history = est.fit.history;
  if (!est.fitted) history = {{0, pm, est.objective.ofv}};
  for (const FitIteration& it : history)
    row(
        it.iteration, [&](const Column& c) { return c.value(it.model); }, it.ofv);
  row(
      -1000000000LL, [&](const Column& c) { return c.value(pm); }, est.objective.ofv);
  const bool cov = est.covariance && est.covariance->ok;
  if (cov) {
    row(
        -1000000001LL,
        [&](const Column& c) {
          auto f = se.find(c.se_name);
          return f != se.end() ? f->second : 1e10;  // NONMEM: 1E+10 for what is not estimated
        },
        0.0);
    const Eigen::VectorXd& ev = est.covariance->eigenvalues;
    std::size_t k = 0;
    row(
        -1000000002LL,
        [&](const Column&) {
          return k < static_cast<std::size_t>(ev.size()) ? ev(static_cast<Eigen::Index>(k++)) : 0.0;
        },
        0.0);
    k = 0;
    const double stats[3] = {est.covariance->condition_number, ev.minCoeff(), ev.maxCoeff()};
    row(
        -1000000003LL, [&](const Column&) { return k < 3 ? stats[k++] : 0.0; }, 0.0);
  }
  // The SD/correlation form of OMEGA and SIGMA (0 for THETA, as NONMEM writes it).
  row(
      -1000000004LL,
      [&](const Column& c) {
        if (c.var_i < 0) return 0.0;
        const auto var = [&](int i) {
          if (!c.sigma) return pm.omega(i, i);
          return pm.*(sig[static_cast<std::size_t>(i)].second);
        };
        if (c.var_i == c.var_j) return std::sqrt(var(c.var_i));
        if (c.sigma) return 0.0;
        return pm.omega(c.var_i, c.var_j) / std::sqrt(var(c.var_i) * var(c.var_j));
      },
      0.0);
  row(
      -1000000006LL, [&](const Column& c) { return c.fixed ? 1.0 : 0.0; }, 0.0);
  return text;
}

}  // namespace

bool is_fit_file(const std::string& path) {
  auto ends = [&](const char* ext) {
    const std::string e(ext);
    return path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0;
  };
  return ends(".yaml") || ends(".yml");
}

int run_population_fit(const std::string& file, int threads, bool quiet, std::ostream& out,
                       std::ostream& err) {
  const config::FitFile fit = config::load_fit_file(file);
  const ModelInfo& m = *fit.model;
  const std::string main = fit.output_path;
  const std::string subjects_file = companion(main, ".subjects.csv");
  const std::string table_file = companion(main, ".table.csv");
  const std::string ext_file = companion(main, ".ext");
  const std::vector<std::string> companions = {subjects_file, table_file, ext_file};
  try {
    output::check_output_not_input(main, companions, fit.inputs);
    output::check_output_unit(main, companions);
  } catch (const Error& e) {
    throw InvalidArgument(std::string("output.path: ") + e.what());
  }
  const Predictor predictor(*fit.dataset, fit.model);
  EstimationOptions options;
  options.method = fit.method;
  options.threads = threads;
  PopulationFitSpec spec;
  spec.initial = fit.population;
  for (const config::FitTheta& t : fit.theta)
    if (!t.fixed) {
      spec.theta_columns.push_back(t.column);
      spec.theta_lower.push_back(t.lower);
      spec.theta_upper.push_back(t.upper);
    }
  spec.effect_indices = fit.effect_indices;
  spec.omega_block = fit.omega_block;
  spec.estimate_omega = !fit.omega_fixed;
  spec.estimate_sigma = !fit.sigma_fixed;
  const PopulationEstimate est =
      estimate_population(predictor, spec, options, fit.max_evaluations, fit.covariance);
  const PopulationModel& pm = est.estimates;
  const PopulationObjective& r = est.objective;
  const PopulationDiagnostics& diag = est.diagnostics;
  const bool fitting = est.fitted;
  const PopulationFit& result = est.fit;
  const bool want_cov = est.covariance.has_value();
  const bool cov_ok = want_cov && est.covariance->ok;

  auto name = [&](int k) {
    return m.parameters[static_cast<std::size_t>(pm.eta_columns[static_cast<std::size_t>(k)])].name;
  };
  std::map<std::string, double> se;  // by row name
  if (cov_ok) {
    const CovarianceStep& cov = *est.covariance;
    for (std::size_t i = 0; i < cov.parameters.size(); ++i)
      se[estimated_parameter_name(m, pm, cov.parameters[i])] = cov.se(static_cast<Eigen::Index>(i));
  }

  // The estimates: THETA, OMEGA (lower triangle by rows), SIGMA (variances), then the OFV. cv:
  // an OMEGA variance's log-normal CV% (100 sqrt(exp(OMEGA) - 1)), the proportional SIGMA's
  // 100 sqrt(SIGMA); shrinkage: ETAshrinkSD% on OMEGA's diagonal, EPSshrinkSD% on SIGMA.
  auto row = [&](const std::string& n, double v, bool fixed, double cv, double shrinkage) {
    std::string s = n + "," + number(v) + ",";
    if (auto it = se.find(n); it != se.end())
      s += number(it->second) + "," + number(100.0 * it->second / std::abs(v));
    else
      s += ",";
    s += std::string(",") + (fixed ? "true" : "false") + ",";
    if (!std::isnan(cv)) s += number(cv);
    s += ",";
    if (!std::isnan(shrinkage)) s += number(shrinkage);
    return s + "\n";
  };
  constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  std::string text = "name,estimate,se,rse,fixed,cv,shrinkage\n";
  for (const config::FitTheta& t : fit.theta)
    text += row("theta." + t.name, pm.theta_row[static_cast<std::size_t>(t.column)], t.fixed, kNone,
                kNone);
  for (std::size_t e = 0; e < pm.effects.size(); ++e)
    text += row(estimated_parameter_name(
                    m, pm, {EstimatedParameter::Kind::Effect, static_cast<int>(e), 0, 0.0}),
                pm.effects[e].coefficient, fit.effect_fixed[e], kNone, kNone);
  const int q = static_cast<int>(pm.eta_columns.size());
  for (int i = 0; i < q; ++i)
    for (int j = 0; j <= i; ++j)
      if (i == j || fit.omega_block)
        text += row("omega." + name(i) + "." + name(j), pm.omega(i, j), fit.omega_fixed,
                    i == j ? 100.0 * std::sqrt(std::expm1(pm.omega(i, i))) : kNone,
                    i == j ? diag.eta_shrinkage[static_cast<std::size_t>(i)] : kNone);
  if (fit.proportional)
    text += row("sigma.proportional", pm.sigma_proportional, fit.sigma_fixed,
                100.0 * std::sqrt(pm.sigma_proportional), diag.eps_shrinkage);
  if (fit.additive)
    text += row("sigma.additive", pm.sigma_additive, fit.sigma_fixed, kNone, diag.eps_shrinkage);
  const std::string table = text;
  text += "ofv," + number(r.ofv) + ",,,,,\n";

  // Per subject: the EBEs and OBJI.
  std::string subj = "id";
  for (int k = 0; k < q; ++k) subj += ",eta_" + name(k);
  subj += ",obji,observations,status\n";
  std::int64_t observations = 0;
  for (std::size_t s = 0; s < r.subjects.size(); ++s) {
    const SubjectObjective& so = r.subjects[s];
    subj += csv_field(predictor.dataset().subjects[s].id);
    for (double e : so.eta) subj += "," + number(e);
    subj += "," + number(so.obji) + "," + std::to_string(so.observations) + "," +
            to_string(so.status) + "\n";
    observations += so.observations;
  }

  // Per observation: NONMEM's diagnostics, with the subject's EBEs.
  std::string tab = "id,line,time,dv,pred,ipred,res,ires,wres,cwres,cwresi,iwres";
  for (int k = 0; k < q; ++k) tab += ",eta_" + name(k);
  tab += "\n";
  for (std::size_t i = 0; i < diag.subject.size(); ++i) {
    const std::size_t s = static_cast<std::size_t>(diag.subject[i]);
    tab += csv_field(predictor.dataset().subjects[s].id) + "," + std::to_string(diag.line[i]);
    for (const std::vector<double>* c :
         {&diag.time, &diag.dv, &diag.pred, &diag.ipred, &diag.res, &diag.ires, &diag.wres,
          &diag.cwres, &diag.cwresi, &diag.iwres})
      tab += "," + number((*c)[i]);
    for (double e : r.subjects[s].eta) tab += "," + number(e);
    tab += "\n";
  }
  const std::string ext = ext_table(fit, est, se);

  output::OutputUnit unit(main);
  for (const auto& [path, body] : {std::pair<const std::string&, const std::string&>{main, text},
                                   {subjects_file, subj},
                                   {table_file, tab},
                                   {ext_file, ext}}) {
    output::AtomicFile& f = unit.add(path);
    f.write(body.data(), body.size());
  }
  unit.commit();

  if (r.unconverged() > 0)
    err << "pkscan: warning: the EBE search of " << r.unconverged() << " of " << r.subjects.size()
        << " subjects did not converge (see the status column of " << subjects_file << ")\n";
  if (!quiet) {
    char buf[96];
    std::string method = to_string(fit.method);
    for (char& c : method) c = static_cast<char>(c - 'a' + 'A');
    out << "pkscan: " << method << ", " << r.subjects.size() << " subjects, " << observations
        << " observations: ";
    if (fitting) {
      std::snprintf(buf, sizeof buf, "%.2f", est.estimation_seconds);
      out << (result.converged ? "converged" : "not converged") << " after " << result.iterations
          << " iterations, " << result.evaluations << " objective evaluations (" << buf << " s)\n";
    } else {
      out << "the objective at the initial estimates (max_evaluations 0)\n";
    }
    std::snprintf(buf, sizeof buf, "%.6f", r.ofv);
    out << "OFV " << buf << "\n";
    if (cov_ok) {
      std::snprintf(buf, sizeof buf, "condition number %.4g, %.2f s",
                    est.covariance->condition_number, est.covariance_seconds);
      out << "covariance step (" << to_string(*fit.covariance) << "): ok, " << buf << "\n";
    }
    // The estimates as a table: name, value, SE and RSE, CV and shrinkage.
    for (const std::string& line : split(table)) {
      if (line.rfind("name,", 0) == 0) continue;
      const std::vector<std::string> f = split_fields(line);
      std::snprintf(buf, sizeof buf, "%-28s %12.6g", f[0].c_str(), std::stod(f[1]));
      out << buf;
      if (!f[2].empty()) {
        std::snprintf(buf, sizeof buf, "  SE %10.4g  RSE %6.1f%%", std::stod(f[2]),
                      std::stod(f[3]));
        out << buf;
      }
      if (!f[5].empty()) {
        std::snprintf(buf, sizeof buf, "  CV %6.1f%%", std::stod(f[5]));
        out << buf;
      }
      if (!f[6].empty()) {
        std::snprintf(buf, sizeof buf, "  shrinkage %5.1f%%", std::stod(f[6]));
        out << buf;
      }
      out << (f[4] == "true" ? "  (fixed)" : "") << "\n";
    }
    out << "wrote " << main << ", " << subjects_file << ", " << table_file << " and " << ext_file
        << "\n";
  }
  if (want_cov && !cov_ok) {
    error_line(err, file + ": the covariance step failed: " + est.covariance->message +
                        "; the estimates without standard errors are in " + main);
    return 1;
  }
  if (fitting && !result.converged) {
    // A failed fit (exit status 1): its last iterate is written, whole, for a restart.
    error_line(err, file + ": the fit did not converge (" + result.message +
                        "); the estimates at its last iterate are in " + main);
    return 1;
  }
  return 0;
}

}  // namespace pkscan::cli
