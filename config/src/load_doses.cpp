// The time grid of a run and what lies on it: time.dt and time.steps, the doses (on the grid),
// and the euler step's rule (the library's, reported at time.dt).
#include <cmath>
#include <cstdint>
#include <pkscan/checks.hpp>
#include <pkscan/error.hpp>
#include <string>
#include <vector>

#include "load_sections.hpp"

namespace pkscan::config::detail {

TimeNodes parse_time(const Loader& L, const Loader::Entries& top, const YAML::Node& root,
                     Problem& p) {
  const Loader::Entry& time_e = L.require(top, "time", root, "the run file");
  auto time = L.entries(time_e.value, "time", {"dt", "steps"});
  const YAML::Node dt_node = L.require(time, "dt", time_e.value, "time").value;
  p.grid.dt = L.finite(dt_node, "time.dt", "finite and > 0", true);
  const YAML::Node steps_node = L.require(time, "steps", time_e.value, "time").value;
  p.grid.steps = L.integer(steps_node, "time.steps", 1, 1'000'000'000);
  if (!std::isfinite(p.grid.time(p.grid.steps)))
    L.fail(steps_node, "time.steps * time.dt is not finite; use fewer steps or a smaller dt");
  return TimeNodes{dt_node, steps_node};
}

void parse_doses(const Loader& L, const Loader::Entries& top, Problem& p) {
  const ModelInfo& model = p.parameters.info();
  if (auto it = top.find("doses"); it != top.end()) {
    const YAML::Node& dl = it->second.value;
    if (dl.IsNull()) {
      // "doses:" with nothing: no doses
    } else if (!dl.IsSequence()) {
      L.fail(dl, "doses must be a list of doses, each {compartment, time, amount, ...}");
    } else {
      std::vector<std::string> cnames = model.compartments;
      for (std::size_t i = 0; i < dl.size(); ++i) {
        const std::string ctx = "doses[" + std::to_string(i + 1) + "]";
        const YAML::Node& dn = dl[i];
        auto d = L.entries(
            dn, ctx, {"compartment", "time", "amount", "rate", "duration", "every", "repeat"});
        DoseEvent ev;
        const YAML::Node cn = L.require(d, "compartment", dn, ctx).value;
        const std::string cname =
            L.scalar_string(cn, ctx + ".compartment", "one of " + join(cnames));
        ev.compartment = compartment_index(model, cname);
        if (ev.compartment < 0)
          L.fail(cn, ctx + ".compartment is \"" + cname + "\", but must be one of " + join(cnames));
        const YAML::Node tn = L.require(d, "time", dn, ctx).value;
        ev.time = L.finite(tn, ctx + ".time", "finite and >= 0", false);
        if (p.grid.index_of(ev.time) < 0)
          L.fail(tn, ctx + ".time is " + tn.Scalar() +
                         ", but must lie on the time grid (a multiple of time.dt = " +
                         format_value(p.grid.dt) + ")");
        ev.amount = L.finite(L.require(d, "amount", dn, ctx).value, ctx + ".amount",
                             "finite and >= 0", false);
        auto r = d.find("rate");
        auto du = d.find("duration");
        if (r != d.end() && du != d.end())
          L.fail(du->second.key,
                 ctx + " gives both rate and duration, but an infusion takes exactly one of them");
        if (r != d.end())
          ev.rate = L.finite(r->second.value, ctx + ".rate", "finite and > 0", true);
        if (du != d.end())
          ev.duration = L.finite(du->second.value, ctx + ".duration", "finite and > 0", true);
        auto ev_it = d.find("every");
        auto rep_it = d.find("repeat");
        if ((ev_it == d.end()) != (rep_it == d.end())) {
          const auto& given = ev_it != d.end() ? ev_it->second : rep_it->second;
          L.fail(given.key, ctx + " gives " + given.key.Scalar() + " without " +
                                (ev_it != d.end() ? "repeat" : "every") +
                                "; repeated doses need both (every: interval, repeat: number of "
                                "additional doses)");
        }
        if (ev_it != d.end()) {
          ev.every = L.finite(ev_it->second.value, ctx + ".every", "finite and > 0", true);
          if (p.grid.index_of(ev.every) < 0)
            L.fail(ev_it->second.value,
                   ctx + ".every is " + ev_it->second.value.Scalar() +
                       ", but must be a multiple of time.dt = " + format_value(p.grid.dt));
          ev.repeat = L.integer(rep_it->second.value, ctx + ".repeat", 0, 100'000'000);
        }
        p.doses.push_back(ev);
      }
    }
  }
}

void check_euler_step(const Loader& L, const Problem& p, const YAML::Node& dt_node) {
  if (p.discretization != Discretization::Euler) return;
  const EulerViolation v = first_euler_violation(p.parameters, p.grid.dt);
  if (!v) return;
  const std::string& c = p.parameters.info().compartments[static_cast<std::size_t>(v.compartment)];
  L.fail(dt_node, "time.dt is " + dt_node.Scalar() +
                      ", but with discretization euler it must keep 1 + A*dt >= 0: subject " +
                      std::to_string(v.subject + 1) + " has K[" + c + "][" + c +
                      "] = " + format_value(v.k) + "; use a smaller dt or discretization: exact");
}

}  // namespace pkscan::config::detail
