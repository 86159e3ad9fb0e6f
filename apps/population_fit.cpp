#include "population_fit.hpp"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <pkscan/config/fit_file.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

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

// "theo_fit.csv" -> "theo_fit.subjects.csv"
std::string subjects_path(const std::string& main) {
  return main.substr(0, main.size() - 4) + ".subjects.csv";
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
  const std::string subjects_file = subjects_path(main);
  try {
    output::check_output_not_input(main, {subjects_file}, fit.inputs);
    output::check_output_unit(main, {subjects_file});
  } catch (const Error& e) {
    throw InvalidArgument(std::string("output.path: ") + e.what());
  }
  const Predictor predictor(*fit.dataset, fit.model);
  EstimationOptions options;
  options.method = fit.method;
  options.threads = threads;
  const PopulationObjective start = population_objective(predictor, fit.population, options);
  if (!start.finite()) {
    std::string who;
    for (std::size_t s = 0; s < start.subjects.size() && who.empty(); ++s)
      if (!std::isfinite(start.subjects[s].obji))
        who = " (first at subject ID " + predictor.dataset().subjects[s].id + ")";
    throw DomainError("the objective is not finite at the initial estimates" + who +
                      ": a prediction or residual variance there is not finite or not > 0");
  }

  // max_evaluations 0: the objective at the initial estimates; otherwise the fit.
  PopulationModel pm = fit.population;
  PopulationObjective r = start;
  PopulationFit result;
  const bool fitting = fit.max_evaluations > 0;
  const auto t0 = std::chrono::steady_clock::now();
  PopulationFitSpec spec;
  spec.initial = fit.population;
  for (const config::FitTheta& t : fit.theta)
    if (!t.fixed) {
      spec.theta_columns.push_back(t.column);
      spec.theta_lower.push_back(t.lower);
      spec.theta_upper.push_back(t.upper);
    }
  spec.omega_block = fit.omega_block;
  spec.estimate_omega = !fit.omega_fixed;
  spec.estimate_sigma = !fit.sigma_fixed;
  if (fitting) {
    result = fit_population(predictor, spec, options, fit.max_evaluations);
    pm = result.estimates;
    r = result.objective;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The covariance step at the estimates (after a fit that converged, or at the file's).
  CovarianceStep cov;
  std::map<std::string, double> se;  // by row name
  const bool want_cov = fit.covariance.has_value() && (!fitting || result.converged);
  if (want_cov) {
    spec.initial = pm;
    cov = covariance_step(predictor, spec, options, *fit.covariance);
    if (cov.ok)
      for (std::size_t i = 0; i < cov.parameters.size(); ++i) {
        const EstimatedParameter& p = cov.parameters[i];
        const auto col = [&](int k) {
          return m.parameters[static_cast<std::size_t>(pm.eta_columns[static_cast<std::size_t>(k)])]
              .name;
        };
        std::string n;
        if (p.kind == EstimatedParameter::Kind::Theta)
          n = "theta." + m.parameters[static_cast<std::size_t>(p.index)].name;
        else if (p.kind == EstimatedParameter::Kind::Omega)
          n = "omega." + col(p.index) + "." + col(p.index2);
        else
          n = p.index == 0 ? "sigma.proportional" : "sigma.additive";
        se[n] = cov.se(static_cast<Eigen::Index>(i));
      }
  }

  // The estimates: THETA, OMEGA (lower triangle by rows), SIGMA (variances), then the OFV.
  auto row = [&](const std::string& n, double v, bool fixed) {
    std::string s = n + "," + number(v) + ",";
    if (auto it = se.find(n); it != se.end())
      s += number(it->second) + "," + number(100.0 * it->second / std::abs(v));
    else
      s += ",";
    return s + "," + (fixed ? "true" : "false") + "\n";
  };
  std::string text = "name,estimate,se,rse,fixed\n";
  for (const config::FitTheta& t : fit.theta)
    text += row("theta." + t.name, pm.theta_row[static_cast<std::size_t>(t.column)], t.fixed);
  auto name = [&](int k) {
    return m.parameters[static_cast<std::size_t>(pm.eta_columns[static_cast<std::size_t>(k)])].name;
  };
  const int q = static_cast<int>(pm.eta_columns.size());
  for (int i = 0; i < q; ++i)
    for (int j = 0; j <= i; ++j)
      if (i == j || fit.omega_block)
        text += row("omega." + name(i) + "." + name(j), pm.omega(i, j), fit.omega_fixed);
  if (fit.proportional) text += row("sigma.proportional", pm.sigma_proportional, fit.sigma_fixed);
  if (fit.additive) text += row("sigma.additive", pm.sigma_additive, fit.sigma_fixed);
  const std::string table = text;
  text += "ofv," + number(r.ofv) + ",,,\n";

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

  output::OutputUnit unit(main);
  output::AtomicFile& est = unit.add(main);
  est.write(text.data(), text.size());
  output::AtomicFile& sub = unit.add(subjects_file);
  sub.write(subj.data(), subj.size());
  unit.commit();

  if (r.unconverged() > 0)
    err << "pkscan: warning: the EBE search of " << r.unconverged() << " of " << r.subjects.size()
        << " subjects did not converge (see the status column of " << subjects_file << ")\n";
  if (!quiet) {
    char buf[64];
    std::string method = to_string(fit.method);
    for (char& c : method) c = static_cast<char>(c - 'a' + 'A');
    out << "pkscan: " << method << ", " << r.subjects.size() << " subjects, " << observations
        << " observations: ";
    if (fitting) {
      std::snprintf(buf, sizeof buf, "%.2f", seconds);
      out << (result.converged ? "converged" : "not converged") << " after " << result.iterations
          << " iterations, " << result.evaluations << " objective evaluations (" << buf << " s)\n";
    } else {
      out << "the objective at the initial estimates (max_evaluations 0)\n";
    }
    std::snprintf(buf, sizeof buf, "%.6f", r.ofv);
    out << "OFV " << buf << "\n";
    if (want_cov && cov.ok) out << "covariance step (" << to_string(*fit.covariance) << "): ok\n";
    if (fitting || (want_cov && cov.ok)) {
      // The estimates as a table: name and value.
      for (const std::string& line : split(table)) {
        const std::size_t comma = line.find(',');
        if (line.rfind("name,", 0) == 0) continue;
        const std::string n = line.substr(0, comma);
        const double v = std::stod(line.substr(comma + 1));
        std::snprintf(buf, sizeof buf, "%-28s %12.6g", n.c_str(), v);
        out << buf;
        if (auto it = se.find(n); it != se.end()) {
          std::snprintf(buf, sizeof buf, "  SE %10.4g  RSE %6.1f%%", it->second,
                        100.0 * it->second / std::abs(v));
          out << buf;
        }
        out << (line.find(",true") != std::string::npos ? "  (fixed)" : "") << "\n";
      }
    }
    out << "wrote " << main << " and " << subjects_file << "\n";
  }
  if (want_cov && !cov.ok) {
    err << "pkscan: error: " << file << ": the covariance step failed: " << cov.message
        << "; the estimates without standard errors are in " << main << "\n";
    return 1;
  }
  if (fitting && !result.converged) {
    // A failed fit (exit status 1): its last iterate is written, whole, for a restart.
    err << "pkscan: error: " << file << ": the fit did not converge (" << result.message
        << "); the estimates at its last iterate are in " << main << "\n";
    return 1;
  }
  return 0;
}

}  // namespace pkscan::cli
