#include "population_fit.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
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
  const PopulationObjective r = population_objective(predictor, fit.population, options);
  if (!r.finite()) {
    std::string who;
    for (std::size_t s = 0; s < r.subjects.size() && who.empty(); ++s)
      if (!std::isfinite(r.subjects[s].obji))
        who = " (first at subject ID " + predictor.dataset().subjects[s].id + ")";
    throw DomainError("the objective is not finite at the initial estimates" + who +
                      ": a prediction or residual variance there is not finite or not > 0");
  }

  // The estimates: THETA, OMEGA (lower triangle by rows), SIGMA (variances), then the OFV.
  std::string text = "name,estimate,se,rse,fixed\n";
  for (const config::FitTheta& t : fit.theta)
    text += "theta." + t.name + "," + number(t.init) + ",,," + (t.fixed ? "true" : "false") + "\n";
  const PopulationModel& pm = fit.population;
  auto name = [&](int k) {
    return m.parameters[static_cast<std::size_t>(pm.eta_columns[static_cast<std::size_t>(k)])].name;
  };
  const int q = static_cast<int>(pm.eta_columns.size());
  for (int i = 0; i < q; ++i)
    for (int j = 0; j <= i; ++j)
      if (i == j || pm.omega(i, j) != 0.0)
        text += "omega." + name(i) + "." + name(j) + "," + number(pm.omega(i, j)) + ",,,false\n";
  if (fit.proportional)
    text += "sigma.proportional," + number(pm.sigma_proportional) + ",,,false\n";
  if (fit.additive) text += "sigma.additive," + number(pm.sigma_additive) + ",,,false\n";
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
    char ofv[64];
    std::snprintf(ofv, sizeof ofv, "%.6f", r.ofv);
    std::string method = to_string(fit.method);
    for (char& c : method) c = static_cast<char>(c - 'a' + 'A');
    out << "pkscan: " << method << " objective at the initial estimates (max_evaluations 0), "
        << r.subjects.size() << " subjects, " << observations << " observations\n"
        << "OFV " << ofv << "\n"
        << "wrote " << main << " and " << subjects_file << "\n";
  }
  return 0;
}

}  // namespace pkscan::cli
