// The time grid of a run and what lies on it: time.dt and time.steps, the doses (on the grid).
// Their rules are the library's (pkscan/checks.hpp: check_time_grid, check_doses); this file
// reads the values and says where each one is (Loader::checked).
#include <algorithm>
#include <cstdint>
#include <pkscan/checks.hpp>
#include <pkscan/error.hpp>
#include <string>
#include <vector>

#include "load_sections.hpp"

namespace pkscan::config::detail {

Locate locate_time(const TimeNodes& time) {
  return [&time](const std::string& field) -> std::optional<Located> {
    if (field == "grid.dt") return Located{time.dt, "time.dt"};
    if (field == "grid.steps") return Located{time.steps, "time.steps"};
    return std::nullopt;
  };
}

TimeNodes parse_time(const Loader& L, const Loader::Entries& top, const YAML::Node& root,
                     Problem& p) {
  const Loader::Entry& time_e = L.require(top, "time", root, "the run file");
  auto time = L.entries(time_e.value, "time", {"dt", "steps"});
  TimeNodes nodes{L.require(time, "dt", time_e.value, "time").value,
                  L.require(time, "steps", time_e.value, "time").value};
  p.grid.dt = L.number(nodes.dt, "time.dt");
  p.grid.steps = L.whole(nodes.steps, "time.steps");
  L.checked(locate_time(nodes), [&] { check_time_grid(p.grid); });
  return nodes;
}

void parse_dose_list(const Loader& L, const YAML::Node& dl, const std::string& ctx_name,
                     const Problem& p, const PopulationSpec* pop, std::vector<DoseEvent>& doses,
                     std::vector<DoseScaling>& scaling, FieldTable* fields,
                     const std::string& scaling_field) {
  const ModelInfo& model = p.parameters.info();
  if (!dl.IsSequence())
    L.fail(dl, ctx_name + " must be a list of doses, each {compartment, time, amount, ...}");
  const std::vector<std::string> cnames = model.compartments;
  std::vector<Loader::Entries> given;  // each dose's keys, where the library's errors point
  const std::size_t first = doses.size();
  bool any_scaling = false;
  // The covariate of `per` or `bands`: a column of the population's covariates file.
  auto covariate = [&](const YAML::Node& n, const std::string& what) {
    const std::string name = L.scalar_string(n, what, "a covariate column");
    if (pop == nullptr || pop->covariate_names.empty())
      L.fail(n, what + " is " + name +
                    ", but a dose per subject needs subjects.population with covariates.file "
                    "(the subject's " +
                    name + ")");
    const auto it = std::find(pop->covariate_names.begin(), pop->covariate_names.end(), name);
    if (it == pop->covariate_names.end())
      L.fail(n, what + " is \"" + name + "\", but the covariates file has the columns " +
                    join(pop->covariate_names));
    return static_cast<int>(it - pop->covariate_names.begin());
  };
  for (std::size_t i = 0; i < dl.size(); ++i) {
    const std::string ctx = ctx_name + "[" + std::to_string(i + 1) + "]";
    const YAML::Node& dn = dl[i];
    given.push_back(L.entries(
        dn, ctx,
        {"compartment", "time", "amount", "rate", "duration", "every", "repeat", "per", "bands"}));
    const Loader::Entries& d = given.back();
    DoseEvent ev;
    DoseScaling sc;
    const YAML::Node cn = L.require(d, "compartment", dn, ctx).value;
    const std::string cname = L.scalar_string(cn, ctx + ".compartment", "one of " + join(cnames));
    ev.compartment = compartment_index(model, cname);
    if (ev.compartment < 0)
      L.fail(cn, ctx + ".compartment is \"" + cname + "\", but must be one of " + join(cnames));
    ev.time = L.number(L.require(d, "time", dn, ctx).value, ctx + ".time");
    const auto bands = d.find("bands");
    const auto per = d.find("per");
    if (bands != d.end()) {
      if (per != d.end())
        L.fail(per->second.key, ctx + " gives both per and bands; give one of them");
      if (auto am = d.find("amount"); am != d.end())
        L.fail(am->second.key, ctx +
                                   " gives both amount and bands (the bands give the amount); "
                                   "remove amount");
      const YAML::Node& bn = bands->second.value;
      const std::string bctx = ctx + ".bands";
      auto b = L.entries(bn, bctx, {"covariate", "edges", "amounts"});
      sc.covariate = covariate(L.require(b, "covariate", bn, bctx).value, bctx + ".covariate");
      const YAML::Node& en = L.require(b, "edges", bn, bctx).value;
      const YAML::Node& an = L.require(b, "amounts", bn, bctx).value;
      if (!en.IsSequence() || en.size() == 0)
        L.fail(en, bctx + ".edges must be a non-empty list of ascending covariate values");
      if (!an.IsSequence() || an.size() != en.size() + 1)
        L.fail(an, bctx + ".amounts must be a list of " + std::to_string(en.size() + 1) +
                       " amounts (one more than edges: below the first edge, between edges, "
                       "from the last edge on)");
      for (std::size_t k = 0; k < en.size(); ++k) {
        sc.band_edges.push_back(L.number(en[k], bctx + ".edges[" + std::to_string(k + 1) + "]"));
        if (k > 0 && !(sc.band_edges[k] > sc.band_edges[k - 1]))
          L.fail(en[k], bctx + ".edges must be ascending");
      }
      for (std::size_t k = 0; k < an.size(); ++k) {
        const double v = L.number(an[k], bctx + ".amounts[" + std::to_string(k + 1) + "]");
        if (!(v >= 0.0))
          L.fail(an[k], bctx + ".amounts[" + std::to_string(k + 1) + "] is " + an[k].Scalar() +
                            ", but must be >= 0");
        sc.band_amounts.push_back(v);
      }
      ev.amount = 1.0;  // the band gives the amount
    } else {
      ev.amount = L.number(L.require(d, "amount", dn, ctx).value, ctx + ".amount");
      if (per != d.end()) sc.covariate = covariate(per->second.value, ctx + ".per");
    }
    if (fields && sc.covariate >= 0)
      fields->emplace(scaling_field + "[" + std::to_string(i) + "].covariate",
                      Located{bands != d.end() ? bands->second.value : per->second.value,
                              ctx + (bands != d.end() ? ".bands" : ".per"), false});
    any_scaling = any_scaling || sc.covariate >= 0;
    // In the library 0 means "not an infusion"; a rate or duration written down is one.
    for (const char* key : {"rate", "duration"}) {
      if (auto k = d.find(key); k != d.end()) {
        const double v = L.number(k->second.value, ctx + "." + key);
        if (v == 0.0)
          L.fail(k->second.value, ctx + "." + key + " is " + k->second.value.Scalar() +
                                      ", but a given " + key +
                                      " must be > 0 (leave it out for a bolus dose)");
        (key[0] == 'r' ? ev.rate : ev.duration) = v;
      }
    }
    auto ev_it = d.find("every");
    auto rep_it = d.find("repeat");
    if ((ev_it == d.end()) != (rep_it == d.end())) {
      const auto& one = ev_it != d.end() ? ev_it->second : rep_it->second;
      L.fail(one.key, ctx + " gives " + one.key.Scalar() + " without " +
                          (ev_it != d.end() ? "repeat" : "every") +
                          "; repeated doses need both (every: interval, repeat: number of "
                          "additional doses)");
    }
    if (ev_it != d.end()) {
      ev.every = L.number(ev_it->second.value, ctx + ".every");
      ev.repeat = L.whole(rep_it->second.value, ctx + ".repeat");
    }
    doses.push_back(ev);
    scaling.push_back(sc);
  }
  if (!any_scaling) scaling.resize(first);
  const std::vector<DoseEvent> mine(doses.begin() + static_cast<std::ptrdiff_t>(first),
                                    doses.end());
  // "doses[i].time" -> the node of that key in dose i.
  L.checked(
      [&](const std::string& field) -> std::optional<Located> {
        std::size_t i = 0;
        std::string rest;
        if (!field_index(field, "doses", &i, &rest) || i >= given.size() || rest.size() < 2)
          return std::nullopt;
        const std::string name = ctx_name + "[" + std::to_string(i + 1) + "]";
        auto k = given[i].find(rest.substr(1));
        if (k == given[i].end()) return Located{dl[i], name};
        return Located{k->second.value, name + rest};
      },
      [&] { check_doses(mine, static_cast<int>(model.compartments.size()), p.grid); });
}

void parse_doses(const Loader& L, const Loader::Entries& top, RunSpec& spec, FieldTable& fields) {
  auto it = top.find("doses");
  if (it == top.end() || it->second.value.IsNull()) return;  // "doses:" with nothing: no doses
  if (!spec.arms.empty())
    L.fail(it->second.key,
           "doses is not used with arms (each arm has its own doses); move them into the arms");
  parse_dose_list(L, it->second.value, "doses", spec.problem,
                  spec.population ? &*spec.population : nullptr, spec.problem.doses,
                  spec.dose_scaling, &fields, "dose_scaling");
}

}  // namespace pkscan::config::detail
