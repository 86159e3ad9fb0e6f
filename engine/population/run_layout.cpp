// Population and sweep runs: their checks and the layout their sinks receive (see
// pkscan/population_run.hpp); the simulation is in run.cpp.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <memory>
#include <pkscan/checks.hpp>
#include <pkscan/engine.hpp>
#include <pkscan/error.hpp>
#include <pkscan/population.hpp>
#include <pkscan/population_run.hpp>
#include <pkscan/summary.hpp>
#include <string>
#include <vector>

#include "core/validate.hpp"
#include "population/residual.hpp"
#include "population/run_parts.hpp"

namespace pkscan {

using detail::base_subjects;
using detail::Groups;
using detail::model_of;
using detail::output_times;

namespace {

// The swept dose properties: each line exists (in every arm), every value follows its field's
// rule, and the doses of each value are doses of the grid (check_doses).
void check_dose_sweep(const PopulationRun& run) {
  const Sweep& sw = run.sweep;
  std::vector<const std::vector<DoseEvent>*> lists;
  std::vector<const std::vector<DoseScaling>*> scalings;
  if (run.arms.empty()) {
    lists.push_back(&run.problem.doses);
    scalings.push_back(&run.dose_scaling);
  }
  for (const Arm& a : run.arms) {
    lists.push_back(&a.doses);
    scalings.push_back(&a.scaling);
  }
  const int compartments = static_cast<int>(model_of(run)->compartments.size());
  for (std::size_t k = 0; k < sw.columns.size(); ++k) {
    if (sw.columns[k] >= 0) continue;
    const DoseTarget& t = sw.dose_targets[static_cast<std::size_t>(-1 - sw.columns[k])];
    const std::string name = dose_target_name(t);
    const std::string field = "sweep.columns[" + std::to_string(k) + "]";
    for (std::size_t l = 0; l < lists.size(); ++l) {
      const std::vector<DoseEvent>& doses = *lists[l];
      const std::string where = run.arms.empty() ? "the run" : "arm " + run.arms[l].name;
      if (t.line < 0 || static_cast<std::size_t>(t.line) >= doses.size())
        throw InvalidArgument("run_population: the sweep varies " + name + ", but " + where +
                                  " has " + std::to_string(doses.size()) + " dose lines",
                              field, name, "");
      const std::vector<DoseScaling>& sc = *scalings[l];
      if (t.field == DoseTarget::Field::Amount && !sc.empty() &&
          !(sc[static_cast<std::size_t>(t.line)].band_edges.empty() &&
            sc[static_cast<std::size_t>(t.line)].band_amounts.empty()))
        throw InvalidArgument("run_population: the sweep varies " + name + ", but in " + where +
                                  " that line's amount comes from its bands",
                              field, name, "");
      for (std::size_t j = 0; j < sw.values[k].size(); ++j) {
        const double v = sw.values[k][j];
        const std::string vf = "sweep.values[" + std::to_string(k) + "][" + std::to_string(j) + "]";
        const bool whole = t.field == DoseTarget::Field::Repeat;
        const bool positive =
            t.field == DoseTarget::Field::Duration || t.field == DoseTarget::Field::Rate;
        const bool ok = std::isfinite(v) && (positive ? v > 0.0 : v >= 0.0) &&
                        (!whole || (v == std::floor(v) && v <= 1e8));
        const std::string rule = whole      ? "a whole number in [0, 100000000]"
                                 : positive ? "finite and > 0"
                                            : "finite and >= 0";
        if (!ok)
          throw DomainError("run_population: sweep value " + std::to_string(j + 1) + " of " + name +
                                " is " + format_value(v) + ", but must be " + rule,
                            vf, format_value(v), rule);
        std::vector<DoseEvent> changed = doses;
        detail::set_dose_field(changed[static_cast<std::size_t>(t.line)], t.field, v);
        try {
          check_doses(changed, compartments, run.problem.grid);
        } catch (const Error& e) {
          std::string msg = e.what();
          if (msg.rfind("simulate: ", 0) == 0) msg = msg.substr(10);
          throw DomainError(
              "run_population: with " + name + " = " + format_value(v) + " (" + where + "): " + msg,
              vf, format_value(v), "");
        }
      }
    }
  }
}

void check_run(const PopulationRun& run) {
  if (!model_of(run))
    throw InvalidArgument("run_population: the run has no model (population.model is null)");
  if (run.replicates < 1)
    throw InvalidArgument("run_population: replicates is " + std::to_string(run.replicates) +
                          ", but must be >= 1");
  if (run.sweep.columns.size() != run.sweep.values.size())
    throw InvalidArgument("run_population: sweep.columns has " +
                          std::to_string(run.sweep.columns.size()) + " entries, but sweep.values " +
                          std::to_string(run.sweep.values.size()));
  const int n = static_cast<int>(model_of(run)->parameters.size());
  const int targets = static_cast<int>(run.sweep.dose_targets.size());
  for (std::size_t k = 0; k < run.sweep.columns.size(); ++k) {
    if (run.sweep.columns[k] < -targets || run.sweep.columns[k] >= n)
      throw InvalidArgument("run_population: sweep.columns[" + std::to_string(k) + "] is " +
                            std::to_string(run.sweep.columns[k]) + ", but must be in [" +
                            std::to_string(-targets) + ", " + std::to_string(n) + ")");
    if (run.sweep.values[k].empty())
      throw InvalidArgument("run_population: sweep.values[" + std::to_string(k) +
                            "] is empty, but must hold at least one value");
  }
  if (run.summaries) detail::check_percentiles("run_population", run.percentiles, true);
  if (!run.replicate_percentiles.empty()) {
    if (!run.summaries || run.replicates < 2 || !run.summary_by || !run.summary_by->replicate)
      throw InvalidArgument(
          "run_population: summaries across replicates need the summaries grouped by "
          "replicate and at least 2 replicates",
          "replicate_percentiles", "", "");
    detail::check_percentiles("run_population", run.replicate_percentiles, true,
                              "replicate_percentiles");
  }
  if (run.summary_by)
    for (std::size_t k = 0; k < run.summary_by->columns.size(); ++k) {
      const int c = run.summary_by->columns[k];
      const auto& sc = run.sweep.columns;
      const std::string field = "summary_by.columns[" + std::to_string(k) + "]";
      if (std::find(sc.begin(), sc.end(), c) == sc.end())
        throw InvalidArgument("run_population: " + field + " is " + std::to_string(c) +
                                  ", but must be a swept column (an entry of sweep.columns)",
                              field, std::to_string(c), "an entry of sweep.columns");
      const auto& bc = run.summary_by->columns;
      if (std::find(bc.begin(), bc.begin() + static_cast<std::ptrdiff_t>(k), c) !=
          bc.begin() + static_cast<std::ptrdiff_t>(k))
        throw InvalidArgument("run_population: " + field + " repeats column " + std::to_string(c),
                              field, std::to_string(c), "a column not listed before");
    }
  // Values: each under its parameter's rule. A population run is a run on a time grid, where
  // every subject gets the same doses: bioavailability and lag cannot vary between subjects.
  const ModelInfo& model = *model_of(run);
  auto grid_dose_parameter = [&](int column) {
    const ParameterRole r = model.parameters[static_cast<std::size_t>(column)].role;
    return r == ParameterRole::Bioavailability || r == ParameterRole::Lag;
  };
  const std::string fixed =
      ": bioavailability and lag cannot vary between subjects in a run on a time grid (every "
      "subject gets the same doses there); use a dataset run (subjects.dataset) for per-subject "
      "bioavailability and lag";
  check_dose_sweep(run);
  for (std::size_t k = 0; k < run.sweep.columns.size(); ++k) {
    if (run.sweep.columns[k] < 0) continue;  // a dose property (check_dose_sweep)
    const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(run.sweep.columns[k])];
    const std::string field = "sweep.columns[" + std::to_string(k) + "]";
    if (grid_dose_parameter(run.sweep.columns[k]))
      throw DomainError("run_population: a sweep over " + pi.name + fixed, field, pi.name, "");
    for (std::size_t j = 0; j < run.sweep.values[k].size(); ++j) {
      const double v = run.sweep.values[k][j];
      if (!parameter_value_ok(pi.role, v))
        throw DomainError("run_population: sweep value " + std::to_string(j + 1) + " of " +
                              pi.name + " is " + format_value(v) + ", but must be " +
                              parameter_rule(pi.role),
                          "sweep.values[" + std::to_string(k) + "][" + std::to_string(j) + "]",
                          format_value(v), parameter_rule(pi.role));
    }
  }
  if (run.residual) {
    detail::check_residual("run_population", *run.residual);
    if (!run.population)
      throw InvalidArgument(
          "run_population: a residual error needs a population (its draws come from its seed)",
          "residual", "", "");
    if (!run.trajectories)
      throw InvalidArgument(
          "run_population: a residual error needs trajectories (each row's observations are "
          "written with them)",
          "residual", "", "");
  }
  if (!std::isnan(run.lloq)) {
    if (!run.residual)
      throw InvalidArgument(
          "run_population: lloq needs a residual error (BLQ flags the simulated "
          "observations)",
          "lloq", format_value(run.lloq), "");
    detail::check_lloq("run_population", run.lloq);
  }
  if (run.summaries) {
    // Also checks the stratification covariate (strata_of).
    const long double need = population_summary_bytes(run);
    const std::uint64_t limit = result_byte_limit(run.options);
    if (need > static_cast<long double>(limit)) {
      const std::int64_t live = Groups(run).live();
      const auto gib = [](long double b) {
        char text[32];
        std::snprintf(text, sizeof text, "%.3g", static_cast<double>(b / 1073741824.0L));
        return std::string(text);
      };
      throw DomainError("run_population: the summaries of " + std::to_string(live) +
                            " groups kept at once need " + gib(need) + " GiB, but only " +
                            gib(static_cast<long double>(limit)) +
                            " GiB are available; group the summaries by fewer swept parameters, "
                            "by replicate as well, or use fewer output times",
                        "summary_by", std::to_string(live) + " groups", "");
    }
  }
  if (run.population) {
    const PopulationSpec& pop = *run.population;
    if (pop.typical.size() == model.parameters.size() &&
        !default_bioavailability_and_lag(model, pop.typical.data()))
      for (std::size_t c = 0; c < pop.typical.size(); ++c)
        if (grid_dose_parameter(static_cast<int>(c)) &&
            pop.typical[c] != model.parameters[c].default_value) {
          const std::string rule = format_value(model.parameters[c].default_value) +
                                   " in a run on a time grid (every subject gets the same doses "
                                   "there); use a dataset run (subjects.dataset) for per-subject "
                                   "bioavailability and lag";
          throw DomainError("run_population: the typical value of " + model.parameters[c].name +
                                " is " + format_value(pop.typical[c]) + ", but must be " + rule,
                            "population.typical[" + std::to_string(c) + "]",
                            format_value(pop.typical[c]), rule);
        }
    for (std::size_t a = 0; a < pop.iiv.size(); ++a)
      if (pop.iiv[a] >= 0 && pop.iiv[a] < n && grid_dose_parameter(pop.iiv[a]))
        throw DomainError("run_population: iiv on " +
                              model.parameters[static_cast<std::size_t>(pop.iiv[a])].name + fixed,
                          "population.iiv[" + std::to_string(a) + "]",
                          model.parameters[static_cast<std::size_t>(pop.iiv[a])].name, "");
    for (std::size_t e = 0; e < pop.effects.size(); ++e) {
      const int c = pop.effects[e].parameter;
      if (c >= 0 && c < n && grid_dose_parameter(c))
        throw DomainError("run_population: covariate effect " + std::to_string(e + 1) + " on " +
                              model.parameters[static_cast<std::size_t>(c)].name + fixed,
                          "population.effects[" + std::to_string(e) + "].parameter",
                          model.parameters[static_cast<std::size_t>(c)].name, "");
    }
  }
}

// Per-subject dose amounts (dose_scaling or an arm's scaling): sizes, covariates, bands, and
// every subject's amount (rows [first, first + count) of the covariates) finite and >= 0.
void check_scaling(const std::vector<DoseScaling>& scaling, const std::vector<DoseEvent>& doses,
                   const PopulationRun& run, const std::string& field, std::int64_t first,
                   std::int64_t count) {
  if (scaling.empty()) return;
  const std::string who = "run_population: ";
  if (scaling.size() != doses.size())
    throw InvalidArgument(who + field + " has " + std::to_string(scaling.size()) +
                              " entries, but there are " + std::to_string(doses.size()) +
                              " dose lines",
                          field, std::to_string(scaling.size()), "one per dose line");
  for (std::size_t i = 0; i < scaling.size(); ++i) {
    const DoseScaling& d = scaling[i];
    if (d.covariate < 0) continue;
    const std::string f = field + "[" + std::to_string(i) + "]";
    if (!run.population || d.covariate >= static_cast<int>(run.population->covariate_names.size()))
      throw InvalidArgument(who + "dose line " + std::to_string(i + 1) +
                                " depends on a covariate, but the population has no covariate " +
                                std::to_string(d.covariate),
                            f + ".covariate", std::to_string(d.covariate), "");
    if (!d.band_edges.empty() || !d.band_amounts.empty()) {
      if (d.band_amounts.size() != d.band_edges.size() + 1)
        throw InvalidArgument(who + "dose line " + std::to_string(i + 1) + " has " +
                                  std::to_string(d.band_edges.size()) + " band edges and " +
                                  std::to_string(d.band_amounts.size()) +
                                  " amounts, but needs one amount more than edges",
                              f + ".band_amounts", std::to_string(d.band_amounts.size()), "");
      for (std::size_t k = 0; k < d.band_edges.size(); ++k)
        if (!std::isfinite(d.band_edges[k]) || (k > 0 && !(d.band_edges[k] > d.band_edges[k - 1])))
          throw DomainError(who + "the band edges of dose line " + std::to_string(i + 1) +
                                " must be finite and ascending",
                            f + ".band_edges[" + std::to_string(k) + "]",
                            format_value(d.band_edges[k]), "finite and ascending");
      for (std::size_t k = 0; k < d.band_amounts.size(); ++k)
        if (!(std::isfinite(d.band_amounts[k]) && d.band_amounts[k] >= 0.0))
          throw DomainError(who + "band amount " + std::to_string(k + 1) + " of dose line " +
                                std::to_string(i + 1) + " is " + format_value(d.band_amounts[k]) +
                                ", but must be finite and >= 0",
                            f + ".band_amounts[" + std::to_string(k) + "]",
                            format_value(d.band_amounts[k]), "finite and >= 0");
    }
    const PopulationSpec& pop = *run.population;
    const std::size_t nc = pop.covariate_names.size();
    for (std::int64_t j = first; j < first + count; ++j) {
      const std::size_t at =
          static_cast<std::size_t>(j) * nc + static_cast<std::size_t>(d.covariate);
      if (at >= pop.covariates.size()) break;  // the sampler reports the covariates' size
      const double x = pop.covariates[at];
      const double amount =
          d.factor(x) * (d.band_edges.empty() && d.band_amounts.empty() ? doses[i].amount : 1.0);
      if (!(std::isfinite(amount) && amount >= 0.0))
        throw DomainError(who + "dose line " + std::to_string(i + 1) + " gives subject " +
                              std::to_string(j + 1) + " (covariate " +
                              pop.covariate_names[static_cast<std::size_t>(d.covariate)] + " = " +
                              format_value(x) + ") the amount " + format_value(amount) +
                              ", but amounts must be finite and >= 0",
                          f + ".covariate", format_value(x), "");
    }
  }
}

void check_arms(const PopulationRun& run) {
  const std::string who = "run_population: ";
  if (run.arms.empty()) {
    if (run.summary_by && run.summary_by->arm)
      throw InvalidArgument(who + "the summaries are grouped by arm, but the run has no arms",
                            "summary_by", "arm", "");
    check_scaling(run.dose_scaling, run.problem.doses, run, "dose_scaling", 0,
                  run.population ? run.population->count : 0);
    return;
  }
  if (!run.population)
    throw InvalidArgument(who + "arms need a population (their subjects are its subjects)", "arms",
                          "", "");
  if (!run.dose_scaling.empty())
    throw InvalidArgument(
        who +
            "with arms, each arm's doses are scaled by the arm (arms[k].scaling), "
            "not by dose_scaling",
        "dose_scaling", "", "");
  if (run.summary_by && !run.summary_by->arm && run.summaries)
    throw InvalidArgument(who +
                              "the summaries of a run with arms are grouped by arm; add arm to "
                              "the groups",
                          "summary_by", "", "");
  std::int64_t total = 0;
  for (std::size_t k = 0; k < run.arms.size(); ++k) {
    const Arm& a = run.arms[k];
    const std::string f = "arms[" + std::to_string(k) + "]";
    if (a.name.empty())
      throw InvalidArgument(who + "arm " + std::to_string(k + 1) + " has no name", f + ".name", "",
                            "");
    if (a.name.find_first_of(",\"\r\n\t") != std::string::npos)
      throw InvalidArgument(who + "arm name \"" + a.name +
                                "\" holds a comma, a quote or a control character; it is "
                                "written as a CSV value",
                            f + ".name", a.name, "");
    for (std::size_t j = 0; j < k; ++j)
      if (run.arms[j].name == a.name)
        throw InvalidArgument(who + "two arms are named " + a.name, f + ".name", a.name,
                              "a name not used before");
    if (a.count < 1)
      throw DomainError(who + "arm " + a.name + " has " + std::to_string(a.count) +
                            " subjects, but needs at least 1",
                        f + ".count", std::to_string(a.count), ">= 1");
    check_scaling(a.scaling, a.doses, run, f + ".scaling", total, a.count);
    if (a.output) {
      // check_output_times' rules, at the arm's field.
      const auto at_arm = [&](const Error& e) {
        const std::string field = f + "." + e.field();
        std::string msg = e.what();
        const std::size_t colon = msg.find(": ");
        if (colon != std::string::npos) msg = msg.substr(colon + 2);
        return std::make_pair(who + "arm " + a.name + ": " + msg, field);
      };
      try {
        check_output_times(*a.output, run.problem.grid);
      } catch (const DomainError& e) {
        const auto [msg, field] = at_arm(e);
        throw DomainError(msg, field, e.value(), e.rule());
      } catch (const InvalidArgument& e) {
        const auto [msg, field] = at_arm(e);
        throw InvalidArgument(msg, field, e.value(), e.rule());
      }
    }
    total += a.count;
  }
  if (total != run.population->count)
    throw InvalidArgument(who + "the arms have " + std::to_string(total) +
                              " subjects, but the population has " +
                              std::to_string(run.population->count),
                          "arms", std::to_string(total), "");
}

}  // namespace

std::string dose_target_name(const DoseTarget& t) {
  static const char* const names[] = {"amount", "every", "repeat", "duration", "rate"};
  return "dose" + std::to_string(t.line + 1) + "_" + names[static_cast<int>(t.field)];
}

std::vector<std::int64_t> arm_counts_of_shares(const std::vector<double>& shares,
                                               std::int64_t count) {
  const std::string who = "arm_counts_of_shares: ";
  if (shares.empty() || count < 0)
    throw InvalidArgument(who + "needs at least one share and a count >= 0");
  double sum = 0.0;
  for (std::size_t k = 0; k < shares.size(); ++k) {
    if (!(shares[k] > 0.0 && shares[k] <= 1.0))
      throw DomainError(who + "share " + std::to_string(k + 1) + " is " + format_value(shares[k]) +
                            ", but must be in (0, 1]",
                        "shares[" + std::to_string(k) + "]", format_value(shares[k]), "(0, 1]");
    sum += shares[k];
  }
  if (std::fabs(sum - 1.0) > 1e-9)
    throw DomainError(who + "the shares add up to " + format_value(sum) + ", but must add up to 1",
                      "shares", format_value(sum), "1");
  // Largest remainders: the counts add up to count; ties go to the earlier arm.
  std::vector<std::int64_t> counts(shares.size());
  std::vector<double> rest(shares.size());
  std::int64_t given = 0;
  for (std::size_t k = 0; k < shares.size(); ++k) {
    const double exact = shares[k] * static_cast<double>(count);
    counts[k] = static_cast<std::int64_t>(std::floor(exact));
    rest[k] = exact - std::floor(exact);
    given += counts[k];
  }
  for (; given < count; ++given) {
    std::size_t best = 0;
    for (std::size_t k = 1; k < rest.size(); ++k)
      if (rest[k] > rest[best]) best = k;
    ++counts[best];
    rest[best] = -1.0;
  }
  return counts;
}

double DoseScaling::factor(double x) const noexcept {
  if (covariate < 0) return 1.0;
  if (band_edges.empty() && band_amounts.empty()) return x;
  const std::size_t k = static_cast<std::size_t>(
      std::upper_bound(band_edges.begin(), band_edges.end(), x) - band_edges.begin());
  return band_amounts[k];
}

void check_population_run(const PopulationRun& run) {
  check_run(run);
  check_arms(run);
  if (run.population) (void)PopulationSampler(*run.population);  // checks in its constructor
}

detail::Strata detail::strata_of(const PopulationRun& run) {
  Strata s;
  if (!run.summary_by || run.summary_by->covariate < 0) return s;
  const int c = run.summary_by->covariate;
  const std::string field = "summary_by.covariate";
  const std::size_t nc = run.population ? run.population->covariate_names.size() : 0;
  if (static_cast<std::size_t>(c) >= nc)
    throw InvalidArgument("run_population: summary_by.covariate is " + std::to_string(c) +
                              ", but must be a column of population.covariate_names (" +
                              std::to_string(nc) + " columns)",
                          field, std::to_string(c), "a covariate column");
  const std::vector<double>& cov = run.population->covariates;
  const std::size_t rows = cov.size() / nc;
  const std::string& name = run.population->covariate_names[static_cast<std::size_t>(c)];
  s.values.reserve(rows);
  for (std::size_t j = 0; j < rows; ++j) {
    const double v = cov[j * nc + static_cast<std::size_t>(c)];
    if (std::isnan(v))
      throw InvalidArgument("run_population: the summaries are stratified by " + name +
                                ", but subject " + std::to_string(j + 1) + "'s " + name + " is NaN",
                            field, name, "");
    s.values.push_back(v);
  }
  std::sort(s.values.begin(), s.values.end());
  s.values.erase(std::unique(s.values.begin(), s.values.end()), s.values.end());
  if (static_cast<std::int64_t>(s.values.size()) > kMaxStrata)
    throw InvalidArgument("run_population: the summaries are stratified by " + name +
                              ", which has " + std::to_string(s.values.size()) +
                              " distinct values, but a stratification covariate may have at most " +
                              std::to_string(kMaxStrata) +
                              " (a category: stratify a continuous covariate by a column of its "
                              "bands)",
                          field, name, "");
  s.of.resize(rows);
  for (std::size_t j = 0; j < rows; ++j)
    s.of[j] =
        static_cast<std::int32_t>(std::lower_bound(s.values.begin(), s.values.end(),
                                                   cov[j * nc + static_cast<std::size_t>(c)]) -
                                  s.values.begin());
  return s;
}

PopulationRun detail::arm_run(const PopulationRun& run, std::size_t k) {
  PopulationRun sub = run;
  sub.arms.clear();
  const Arm& a = run.arms[k];
  sub.problem.doses = a.doses;
  sub.dose_scaling = a.scaling;
  sub.population->count = a.count;
  if (a.output) sub.problem.output = *a.output;
  if (sub.summary_by) sub.summary_by->arm = false;
  return sub;
}

std::vector<double> arm_times_of(const RunLayout& layout, std::int64_t arm) {
  if (layout.arm_names.empty()) return layout.times;
  const auto arms = static_cast<std::int64_t>(layout.arm_names.size());
  const std::size_t nt = layout.times.size();
  if (arm < 0 || arm >= arms || layout.arm_sampled.size() != static_cast<std::size_t>(arms) * nt)
    throw InvalidArgument("arm_times_of: arm " + std::to_string(arm) + " of " +
                          std::to_string(arms) + " arms with " +
                          std::to_string(layout.arm_sampled.size()) +
                          " arm_sampled flags, but arm must be in [0, arms) and arm_sampled hold "
                          "arms x times flags");
  std::vector<double> times;
  for (std::size_t i = 0; i < nt; ++i)
    if (layout.arm_sampled[static_cast<std::size_t>(arm) * nt + i] != 0)
      times.push_back(layout.times[i]);
  return times;
}

std::int64_t population_summary_groups(const PopulationRun& run) {
  if (!run.summaries) return 0;
  if (!run.arms.empty())
    return static_cast<std::int64_t>(run.arms.size()) * Groups(detail::arm_run(run, 0)).total();
  return Groups(run).total();
}

long double population_summary_bytes(const PopulationRun& run) {
  if (!run.summaries) return 0.0L;
  if (!run.arms.empty()) {
    long double most = 0.0L;  // one arm at a time
    for (std::size_t k = 0; k < run.arms.size(); ++k)
      most = std::max(most, population_summary_bytes(detail::arm_run(run, k)));
    return most;
  }
  const TimeSummaryOptions options;
  const int compartments = static_cast<int>(model_of(run)->compartments.size());
  const auto live = static_cast<long double>(Groups(run).live()) *
                    static_cast<long double>(detail::strata_of(run).count());
  // Summaries across replicates keep every replicate's statistics of each group.
  const long double across = run.replicate_percentiles.empty()
                                 ? 0.0L
                                 : 8.0L * live * static_cast<long double>(run.replicates) *
                                       static_cast<long double>(output_times(run)) * compartments *
                                       static_cast<long double>(1 + run.percentiles.size());
  // The exact phase's values, or later the values a pass of exact percentiles collects (twice
  // as many; TimeSummary::begin_pass).
  const long double values =
      (run.exact_percentiles ? 16.0L : 8.0L) * static_cast<long double>(options.exact_values);
  return live * static_cast<long double>(
                    TimeSummary::state_bytes_for(output_times(run), compartments, options)) +
         values + across;
}

std::int64_t population_rows(const PopulationRun& run) noexcept {
  return run.replicates * run.sweep.points() * base_subjects(run);
}

RunLayout population_layout(const PopulationRun& run) {
  check_run(run);
  if (!run.arms.empty()) {
    check_arms(run);
    RunLayout l = population_layout(detail::arm_run(run, 0));
    l.rows = population_rows(run);
    for (std::size_t k = 1; k < run.arms.size(); ++k)
      l.summary_estimates =
          l.summary_estimates || population_layout(detail::arm_run(run, k)).summary_estimates;
    l.extra_columns.insert(l.extra_columns.begin(), "arm");
    for (const Arm& a : run.arms) l.arm_names.push_back(a.name);
    // The time axis: the union of the arms' output steps (every step when an arm samples every
    // one), and which of them each arm samples.
    const TimeGrid& grid = run.problem.grid;
    const auto output_of = [&](std::size_t k) -> const OutputTimes& {
      return run.arms[k].output ? *run.arms[k].output : run.problem.output;
    };
    bool all = false;
    std::vector<std::int64_t> steps, merged;
    for (std::size_t k = 0; k < run.arms.size(); ++k) {
      const OutputTimes& o = output_of(k);
      all = all || o.all;
      if (all) break;
      merged.clear();
      std::set_union(steps.begin(), steps.end(), o.steps.begin(), o.steps.end(),
                     std::back_inserter(merged));
      steps.swap(merged);
    }
    if (all) {
      steps.resize(static_cast<std::size_t>(grid.steps + 1));
      for (std::int64_t i = 0; i <= grid.steps; ++i) steps[static_cast<std::size_t>(i)] = i;
    }
    l.times.resize(steps.size());
    for (std::size_t i = 0; i < steps.size(); ++i) l.times[i] = grid.time(steps[i]);
    const std::size_t nt = steps.size();
    l.arm_sampled.assign(run.arms.size() * nt, 0);
    for (std::size_t k = 0; k < run.arms.size(); ++k) {
      const OutputTimes& o = output_of(k);
      std::int8_t* row = l.arm_sampled.data() + k * nt;
      if (o.all) {
        std::fill(row, row + nt, std::int8_t{1});
        continue;
      }
      std::size_t i = 0;
      for (std::int64_t s : o.steps) {
        while (steps[i] < s) ++i;  // s is in the union
        row[i] = 1;
      }
    }
    const auto arms = static_cast<std::int64_t>(run.arms.size());
    if (run.summaries) {
      l.summary_columns.insert(l.summary_columns.begin(), "arm");
      l.summary_groups *= arms;
      if (l.replicate_summary_groups > 0) {
        l.replicate_summary_columns.insert(l.replicate_summary_columns.begin(), "arm");
        l.replicate_summary_groups *= arms;
      }
    }
    return l;
  }
  const Problem& base = run.problem;
  const ModelInfo& model = *model_of(run);
  RunLayout layout;
  layout.model = model_of(run);
  if (base.output.all) {
    layout.times.reserve(static_cast<std::size_t>(base.grid.steps + 1));
    for (std::int64_t i = 0; i <= base.grid.steps; ++i) layout.times.push_back(base.grid.time(i));
  } else {
    for (std::int64_t s : base.output.steps) layout.times.push_back(base.grid.time(s));
  }
  layout.precision = run.options.precision;
  layout.threads = run.options.threads;
  layout.rows = population_rows(run);
  if (run.replicates > 1) layout.extra_columns.push_back("replicate");
  for (std::size_t k = 0; k < run.sweep.columns.size(); ++k)
    layout.extra_columns.push_back(detail::sweep_name(model, run.sweep, k));
  if (run.summaries) {
    // Whether a group's values may exceed its share of the exact phase (run_part gives every
    // live group exact_values / live): the groups have equal numbers of rows (a stratum's are
    // at most its group's).
    const Groups g(run);
    const detail::Strata strata = detail::strata_of(run);
    const long double rows = static_cast<long double>(population_rows(run)) /
                             static_cast<long double>(std::max<std::int64_t>(1, g.total()));
    const std::int64_t budget = TimeSummaryOptions{}.exact_values / (g.live() * strata.count());
    layout.summary_estimates =
        !run.exact_percentiles && rows * static_cast<long double>(output_times(run)) *
                                          static_cast<long double>(model.compartments.size()) >
                                      static_cast<long double>(budget);
    layout.metric_names = metric_names();
    layout.metric_compartment = model.default_observation_compartment;
    layout.summary_columns = g.columns(model);
    if (!strata.values.empty())
      layout.summary_columns.push_back(
          run.population->covariate_names[static_cast<std::size_t>(run.summary_by->covariate)]);
    layout.summary_groups = g.total() * strata.count();
    if (!run.replicate_percentiles.empty()) {
      layout.replicate_summary_columns.assign(layout.summary_columns.begin() + 1,
                                              layout.summary_columns.end());
      layout.replicate_summary_groups = g.live() * strata.count();
    }
  }
  if (run.population)
    for (int c : run.population->iiv)
      layout.eta_columns.push_back("eta_" + model.parameters[static_cast<std::size_t>(c)].name);
  if (run.parameter_table) {
    // The columns the run gives: a typical value or the subjects' values (a column the run does
    // not give is NaN for every row), and the swept ones.
    const double* given = run.population                   ? run.population->typical.data()
                          : base.parameters.subjects() > 0 ? base.parameters.row(0)
                                                           : nullptr;
    for (int c = 0; c < static_cast<int>(model.parameters.size()); ++c) {
      const auto& sc = run.sweep.columns;
      if ((given != nullptr && !std::isnan(given[c])) ||
          std::find(sc.begin(), sc.end(), c) != sc.end())
        layout.parameter_table.push_back(c);
    }
  }
  layout.observations = run.residual.has_value();
  layout.blq = run.residual.has_value() && !std::isnan(run.lloq);
  layout.trajectories = run.trajectories;
  layout.run_text = run.run_text;
  layout.run_file = run.run_file;
  return layout;
}
}  // namespace pkscan
