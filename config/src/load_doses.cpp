// The time grid of a run and what lies on it: time.dt and time.steps, the doses (on the grid).
// Their rules are the library's (pkscan/checks.hpp: check_time_grid, check_doses); this file
// reads the values and says where each one is (Loader::checked).
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

void parse_doses(const Loader& L, const Loader::Entries& top, Problem& p) {
  const ModelInfo& model = p.parameters.info();
  auto it = top.find("doses");
  if (it == top.end() || it->second.value.IsNull()) return;  // "doses:" with nothing: no doses
  const YAML::Node& dl = it->second.value;
  if (!dl.IsSequence())
    L.fail(dl, "doses must be a list of doses, each {compartment, time, amount, ...}");
  const std::vector<std::string> cnames = model.compartments;
  std::vector<Loader::Entries> given;  // each dose's keys, where the library's errors point
  for (std::size_t i = 0; i < dl.size(); ++i) {
    const std::string ctx = "doses[" + std::to_string(i + 1) + "]";
    const YAML::Node& dn = dl[i];
    given.push_back(L.entries(
        dn, ctx, {"compartment", "time", "amount", "rate", "duration", "every", "repeat"}));
    const Loader::Entries& d = given.back();
    DoseEvent ev;
    const YAML::Node cn = L.require(d, "compartment", dn, ctx).value;
    const std::string cname = L.scalar_string(cn, ctx + ".compartment", "one of " + join(cnames));
    ev.compartment = compartment_index(model, cname);
    if (ev.compartment < 0)
      L.fail(cn, ctx + ".compartment is \"" + cname + "\", but must be one of " + join(cnames));
    ev.time = L.number(L.require(d, "time", dn, ctx).value, ctx + ".time");
    ev.amount = L.number(L.require(d, "amount", dn, ctx).value, ctx + ".amount");
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
    p.doses.push_back(ev);
  }
  // "doses[i].time" -> the node of that key in dose i.
  L.checked(
      [&](const std::string& field) -> std::optional<Located> {
        std::size_t i = 0;
        std::string rest;
        if (!field_index(field, "doses", &i, &rest) || i >= given.size() || rest.size() < 2)
          return std::nullopt;
        const std::string name = "doses[" + std::to_string(i + 1) + "]";
        auto k = given[i].find(rest.substr(1));
        if (k == given[i].end()) return Located{dl[i], name};
        return Located{k->second.value, name + rest};
      },
      [&] { check_doses(p.doses, static_cast<int>(model.compartments.size()), p.grid); });
}

}  // namespace pkscan::config::detail
