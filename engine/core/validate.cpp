#include "core/validate.hpp"

#include <cmath>
#include <fstream>
#include <pkscan/checks.hpp>
#include <pkscan/error.hpp>
#include <sstream>
#include <string>

#include "grid/schedule.hpp"
#include "grid/transition.hpp"

namespace pkscan::detail {

namespace {
constexpr const char* kWhere = "simulate";

std::string subject_name(std::int64_t s) { return "subject " + std::to_string(s + 1); }

void check_finite_nonneg(const std::string& what, double v) {
  if (!std::isfinite(v) || v < 0.0) throw_domain(kWhere, what, format_value(v), "finite and >= 0");
}
}  // namespace

__attribute__((noinline, cold)) void throw_domain(const std::string& where, const std::string& what,
                                                  const std::string& value,
                                                  const std::string& rule) {
  throw DomainError(where + ": " + what + " is " + value + ", but must be " + rule);
}

__attribute__((noinline, cold)) void throw_invalid(const std::string& where,
                                                   const std::string& what,
                                                   const std::string& value,
                                                   const std::string& rule) {
  throw InvalidArgument(where + ": " + what + " is " + value + ", but must be " + rule);
}

void validate_problem(const Problem& p, bool parameters) {
  const ModelInfo& m = p.parameters.info();
  const int n = static_cast<int>(m.compartments.size());
  if (p.parameters.model() != p.model)
    throw_invalid(kWhere, "the parameter batch's model", to_string(p.parameters.model()),
                  "the problem's model " + to_string(p.model));
  if (p.parameters.subjects() < 1)
    throw_domain(kWhere, "the number of subjects", std::to_string(p.parameters.subjects()), ">= 1");

  // Time grid.
  if (!std::isfinite(p.grid.dt) || p.grid.dt <= 0.0)
    throw_domain(kWhere, "time.dt", format_value(p.grid.dt), "finite and > 0");
  if (p.grid.steps < 1 || p.grid.steps > kMaxSteps)
    throw_domain(kWhere, "time.steps", std::to_string(p.grid.steps),
                 "in [1, " + std::to_string(kMaxSteps) + "]");
  if (!std::isfinite(p.grid.time(p.grid.steps)))
    throw_domain(kWhere, "time.dt * time.steps", format_value(p.grid.time(p.grid.steps)), "finite");

  // Parameters: the first subject that fails is found in parallel for large batches, and its
  // error is then raised by the loop below.
  for (std::int64_t s =
           parameters ? first_rejected_row(m, p.parameters.row(0), p.parameters.subjects(), true)
                      : p.parameters.subjects();
       s < p.parameters.subjects(); ++s) {
    const std::string msg = check_parameters(m, p.parameters.row(s));  // empty: no allocation
    if (!msg.empty()) throw DomainError(std::string(kWhere) + ": " + subject_name(s) + " " + msg);
    // A grid run gives every subject the same doses (one shared schedule): per-subject
    // bioavailability and lag need per-subject event times (a dataset run).
    if (!default_bioavailability_and_lag(m, p.parameters.row(s))) {
      for (std::size_t c = 0; c < m.f_parameter.size(); ++c) {
        const int fc = m.f_parameter[c], lc = m.lag_parameter[c];
        const double f = p.parameters.get(s, fc), lag = p.parameters.get(s, lc);
        if (f != 1.0 || lag != 0.0)
          throw_domain(
              kWhere,
              subject_name(s) + " parameter " +
                  m.parameters[static_cast<std::size_t>(f != 1.0 ? fc : lc)].name,
              format_value(f != 1.0 ? f : lag),
              std::string(f != 1.0 ? "1" : "0") +
                  " on a time grid (every subject gets the same doses there); use a dataset run "
                  "(subjects.dataset) for per-subject bioavailability and lag");
      }
    }
  }

  // Doses.
  for (std::size_t i = 0; i < p.doses.size(); ++i) {
    const DoseEvent& d = p.doses[i];
    const std::string dn = "dose " + std::to_string(i + 1);
    if (d.compartment < 0 || d.compartment >= n)
      throw_invalid(kWhere, dn + " compartment", std::to_string(d.compartment),
                    "in [0, " + std::to_string(n) + ") (0-based)");
    check_finite_nonneg(dn + " time", d.time);
    check_finite_nonneg(dn + " amount", d.amount);
    check_finite_nonneg(dn + " rate", d.rate);
    check_finite_nonneg(dn + " duration", d.duration);
    if (d.rate > 0.0 && d.duration > 0.0)
      throw_invalid(kWhere, dn, "given both rate and duration",
                    "an infusion with exactly one of them");
    if (d.repeat < 0 || d.repeat > kMaxRepeat)
      throw_domain(kWhere, dn + " repeat", std::to_string(d.repeat),
                   "in [0, " + std::to_string(kMaxRepeat) + "]");
    if (d.repeat > 0) {
      if (!std::isfinite(d.every) || d.every <= 0.0)
        throw_domain(kWhere, dn + " every", format_value(d.every),
                     "finite and > 0 when repeat > 0");
      if (grid_index(d.every, p.grid.dt) < 1)
        throw_domain(kWhere, dn + " every", format_value(d.every),
                     "a positive multiple of time.dt = " + format_value(p.grid.dt));
    } else if (!std::isfinite(d.every) || d.every < 0.0) {
      throw_domain(kWhere, dn + " every", format_value(d.every), "finite and >= 0");
    }
    if (grid_index(d.time, p.grid.dt) < 0)
      throw_domain(kWhere, dn + " time", format_value(d.time),
                   "on the time grid (a multiple of time.dt = " + format_value(p.grid.dt) + ")");
  }

  // Output times.
  if (!p.output.all) {
    if (p.output.steps.empty())
      throw_invalid(kWhere, "output.times", "empty", "all or a non-empty list");
    for (std::size_t i = 0; i < p.output.steps.size(); ++i) {
      const std::int64_t s = p.output.steps[i];
      if (s < 0 || s > p.grid.steps)
        throw_domain(kWhere, "output time index " + std::to_string(s), "out of range",
                     "in [0, time.steps = " + std::to_string(p.grid.steps) + "]");
      if (i > 0 && s <= p.output.steps[i - 1])
        throw_invalid(kWhere, "output times",
                      "not strictly increasing at entry " + std::to_string(i + 1),
                      "strictly increasing");
    }
  }

  // Euler: K = I + A dt must be non-negative (the step is too long for the rates otherwise).
  if (p.discretization == Discretization::Euler && parameters) {
    if (const EulerViolation v = first_euler_violation(p.parameters, p.grid.dt)) {
      const std::string& c = m.compartments[static_cast<std::size_t>(v.compartment)];
      throw_domain(kWhere,
                   subject_name(v.subject) + " euler transition K[" + c + "][" + c + "] = 1 + A*dt",
                   format_value(v.k),
                   ">= 0 (time.dt is too long for the rates; use a smaller dt or "
                   "discretization: exact)");
    }
  }
}

std::uint64_t result_limit(const SimulateOptions& o) noexcept {
  if (o.max_result_bytes > 0) return o.max_result_bytes;
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024ull / 10ull * 8ull;
  }
  return 4ull << 30;  // unknown: 4 GiB
}

}  // namespace pkscan::detail

namespace pkscan {

EulerViolation first_euler_violation(const ParameterBatch& parameters, double dt) {
  const ModelInfo& m = parameters.info();
  const int n = static_cast<int>(m.compartments.size());
  std::vector<double> out(static_cast<std::size_t>(n));
  for (std::int64_t s = 0; s < parameters.subjects(); ++s) {
    outflow_rates(m, parameters.row(s), out.data());
    for (int r = 0; r < n; ++r) {
      // 1 + A(r, r) dt, A(r, r) = -outflow: the same bits as from rate_matrix().
      const double k = 1.0 + -out[static_cast<std::size_t>(r)] * dt;
      if (k < 0.0) return EulerViolation{s, r, k};
    }
  }
  return EulerViolation{};
}

}  // namespace pkscan
