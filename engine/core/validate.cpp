#include "core/validate.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <pkscan/checks.hpp>
#include <pkscan/error.hpp>
#include <pkscan/threads.hpp>
#include <sstream>
#include <string>

namespace pkscan::detail {

namespace {
constexpr const char* kWhere = "simulate";

std::string subject_name(std::int64_t s) { return "subject " + std::to_string(s + 1); }

std::string dose_field(std::size_t i, const char* member) {
  return "doses[" + std::to_string(i) + "]." + member;
}

void check_finite_nonneg(std::size_t i, const char* member, const std::string& label, double v) {
  if (!std::isfinite(v) || v < 0.0)
    throw_domain(At{dose_field(i, member)}, kWhere, label, format_value(v), "finite and >= 0");
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

__attribute__((noinline, cold)) void throw_domain(const At& at, const std::string& where,
                                                  const std::string& what, const std::string& value,
                                                  const std::string& rule) {
  throw DomainError(where + ": " + what + " is " + value + ", but must be " + rule, at.field, value,
                    rule);
}

__attribute__((noinline, cold)) void throw_invalid(const At& at, const std::string& where,
                                                   const std::string& what,
                                                   const std::string& value,
                                                   const std::string& rule) {
  throw InvalidArgument(where + ": " + what + " is " + value + ", but must be " + rule, at.field,
                        value, rule);
}

void check_percentiles(const std::string& where, const std::vector<double>& percentiles,
                       bool increasing, const std::string& name) {
  for (std::size_t i = 0; i < percentiles.size(); ++i) {
    const At at{name + "[" + std::to_string(i) + "]"};
    const double q = percentiles[i];
    if (!(q >= 0.0 && q <= 100.0))
      throw_invalid(at, where, at.field, format_value(q), "in [0, 100]");
    if (increasing && i > 0 && q <= percentiles[i - 1])
      throw_invalid(at, where, at.field, format_value(q),
                    "greater than the one before (percentiles increase)");
  }
}

void validate_problem(const Problem& p, bool parameters, int threads) {
  if (p.parameters.subjects() < 1)
    throw_domain(At{"parameters"}, kWhere, "the number of subjects",
                 std::to_string(p.parameters.subjects()), ">= 1");
  check_time_grid(p.grid);
  if (parameters) check_parameter_rows(p.parameters, true, threads);
  check_doses(p.doses, static_cast<int>(p.parameters.info().compartments.size()), p.grid);
  check_output_times(p.output, p.grid);
  if (p.discretization == Discretization::Euler && parameters)
    check_euler_step(p.parameters, p.grid.dt);
}

std::uint64_t result_limit(const SimulateOptions& o) noexcept {
  if (o.max_result_bytes > 0) return o.max_result_bytes;
  std::uint64_t available = 4ull << 30;  // unknown: 4 GiB
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") {
      available = kb * 1024ull;
      break;
    }
  }
  // A limit on the address space (ulimit -v) caps what this process can allocate, whatever the
  // machine has: what is left of it beside the process's present size.
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    std::uint64_t used = 0;
    std::ifstream status("/proc/self/status");
    while (status >> key) {
      if (key == "VmSize:" && status >> kb) {
        used = kb * 1024ull;
        break;
      }
    }
    const std::uint64_t cap = as.rlim_cur > used ? as.rlim_cur - used : 0;
    available = std::min(available, cap);
  }
  return available / 10ull * 8ull;
}

}  // namespace pkscan::detail

namespace pkscan {

EulerViolation first_euler_violation(const ParameterBatch& parameters, double dt) {
  const ModelInfo& m = parameters.info();
  const int n = static_cast<int>(m.compartments.size());
  const std::int64_t subjects = parameters.subjects();
  // Subject s's violation (the first compartment with 1 + A(r, r) dt < 0), or none.
  auto violation = [&](std::int64_t s, std::array<double, kMaxLinearCompartments>& out) {
    outflow_rates(m, parameters.row(s), out.data());
    for (int r = 0; r < n; ++r) {
      // 1 + A(r, r) dt, A(r, r) = -outflow: the same bits as from rate_matrix().
      const double k = 1.0 + -out[static_cast<std::size_t>(r)] * dt;
      if (k < 0.0) return EulerViolation{s, r, k};
    }
    return EulerViolation{};
  };
  std::array<double, kMaxLinearCompartments> out{};
  // Small batches stay off OpenMP (entering a region costs more than checking them).
  if (subjects <= 4096) {
    for (std::int64_t s = 0; s < subjects; ++s)
      if (const EulerViolation v = violation(s, out)) return v;
    return EulerViolation{};
  }
  // The first violating subject, found in parallel (large sweeps: docs/performance.md,
  // "Thresholds"); the same subject whatever the thread count.
  std::int64_t first = subjects;
#pragma omp parallel num_threads(resolve_threads(0))
  {
    std::array<double, kMaxLinearCompartments> mine{};
#pragma omp for reduction(min : first) schedule(static)
    for (std::int64_t s = 0; s < subjects; ++s)
      if (violation(s, mine)) first = std::min(first, s);
  }
  return first == subjects ? EulerViolation{} : violation(first, out);
}

using detail::At;
using detail::check_finite_nonneg;
using detail::dose_field;
using detail::kMaxRepeat;
using detail::kMaxSteps;
using detail::kWhere;
using detail::subject_name;
using detail::throw_domain;
using detail::throw_invalid;

void check_time_grid(const TimeGrid& grid) {
  if (!std::isfinite(grid.dt) || grid.dt <= 0.0)
    throw_domain(At{"grid.dt"}, kWhere, "time.dt", format_value(grid.dt), "finite and > 0");
  if (grid.steps < 1 || grid.steps > kMaxSteps)
    throw_domain(At{"grid.steps"}, kWhere, "time.steps", std::to_string(grid.steps),
                 "in [1, " + std::to_string(kMaxSteps) + "]");
  if (!std::isfinite(grid.time(grid.steps)))
    throw DomainError(std::string(kWhere) + ": time.dt * time.steps is " +
                          format_value(grid.time(grid.steps)) +
                          ", but must be finite (use fewer steps or a smaller dt)",
                      "grid.steps", std::to_string(grid.steps), "");
}

void check_parameter_rows(const ParameterBatch& parameters, bool grid_doses, int threads) {
  const ModelInfo& m = parameters.info();
  // The first subject that fails is found in parallel for large batches; the loop below then
  // words its error (it starts there).
  for (std::int64_t s =
           first_rejected_row(m, parameters.row(0), parameters.subjects(), grid_doses, threads);
       s < parameters.subjects(); ++s) {
    const ParameterViolation v = parameter_violation(m, parameters.row(s));
    if (v) {
      const std::string field = "parameters[" + std::to_string(s) + "]." +
                                m.parameters[static_cast<std::size_t>(v.column)].name;
      throw DomainError(std::string(kWhere) + ": " + subject_name(s) + " " + v.message, field,
                        v.value, v.rule);
    }
    // A grid run gives every subject the same doses (one shared schedule): per-subject
    // bioavailability and lag need per-subject event times (a dataset run).
    if (grid_doses && !default_bioavailability_and_lag(m, parameters.row(s))) {
      for (std::size_t c = 0; c < m.f_parameter.size(); ++c) {
        const int fc = m.f_parameter[c], lc = m.lag_parameter[c];
        const double f = parameters.get(s, fc), lag = parameters.get(s, lc);
        if (f == 1.0 && lag == 0.0) continue;
        const std::string& name = m.parameters[static_cast<std::size_t>(f != 1.0 ? fc : lc)].name;
        throw_domain(At{"parameters[" + std::to_string(s) + "]." + name}, kWhere,
                     subject_name(s) + " parameter " + name, format_value(f != 1.0 ? f : lag),
                     std::string(f != 1.0 ? "1" : "0") +
                         " on a time grid (every subject gets the same doses there); use a "
                         "dataset run (subjects.dataset) for per-subject bioavailability and lag");
      }
    }
  }
}

void check_doses(const std::vector<DoseEvent>& doses, int compartments, const TimeGrid& grid) {
  for (std::size_t i = 0; i < doses.size(); ++i) {
    const DoseEvent& d = doses[i];
    const std::string dn = "dose " + std::to_string(i + 1);
    if (d.compartment < 0 || d.compartment >= compartments)
      throw_invalid(At{dose_field(i, "compartment")}, kWhere, dn + " compartment",
                    std::to_string(d.compartment),
                    "in [0, " + std::to_string(compartments) + ") (0-based)");
    check_finite_nonneg(i, "time", dn + " time", d.time);
    check_finite_nonneg(i, "amount", dn + " amount", d.amount);
    check_finite_nonneg(i, "rate", dn + " rate", d.rate);
    check_finite_nonneg(i, "duration", dn + " duration", d.duration);
    if (d.rate > 0.0 && d.duration > 0.0)
      throw_invalid(At{dose_field(i, "duration")}, kWhere, dn + " duration",
                    format_value(d.duration),
                    "left out when rate is given (an infusion takes exactly one of rate and "
                    "duration)");
    if (d.repeat < 0 || d.repeat > kMaxRepeat)
      throw_domain(At{dose_field(i, "repeat")}, kWhere, dn + " repeat", std::to_string(d.repeat),
                   "in [0, " + std::to_string(kMaxRepeat) + "]");
    if (d.repeat > 0) {
      if (!std::isfinite(d.every) || d.every <= 0.0)
        throw_domain(At{dose_field(i, "every")}, kWhere, dn + " every", format_value(d.every),
                     "finite and > 0 when repeat > 0");
      if (grid.index_of(d.every) < 1)
        throw_domain(At{dose_field(i, "every")}, kWhere, dn + " every", format_value(d.every),
                     "a positive multiple of time.dt = " + format_value(grid.dt));
    } else if (!std::isfinite(d.every) || d.every < 0.0) {
      throw_domain(At{dose_field(i, "every")}, kWhere, dn + " every", format_value(d.every),
                   "finite and >= 0");
    }
    if (grid.index_of(d.time) < 0)
      throw_domain(At{dose_field(i, "time")}, kWhere, dn + " time", format_value(d.time),
                   "on the time grid (a multiple of time.dt = " + format_value(grid.dt) + ")");
  }
}

void check_output_times(const OutputTimes& output, const TimeGrid& grid) {
  if (output.all) return;
  if (output.steps.empty())
    throw_invalid(At{"output.steps"}, kWhere, "output.times", "empty", "all or a non-empty list");
  for (std::size_t i = 0; i < output.steps.size(); ++i) {
    const std::int64_t s = output.steps[i];
    const At at{"output.steps[" + std::to_string(i) + "]"};
    if (s < 0 || s > grid.steps)
      throw_domain(at, kWhere, "output time index " + std::to_string(s), "out of range",
                   "in [0, time.steps = " + std::to_string(grid.steps) + "]");
    if (i > 0 && s <= output.steps[i - 1])
      throw_invalid(at, kWhere, "output time " + std::to_string(i + 1) + " (grid index)",
                    std::to_string(s), "greater than the one before (output times increase)");
  }
}

void check_euler_step(const ParameterBatch& parameters, double dt) {
  if (const EulerViolation v = first_euler_violation(parameters, dt)) {
    const std::string& c = parameters.info().compartments[static_cast<std::size_t>(v.compartment)];
    throw DomainError(std::string(kWhere) + ": time.dt is " + format_value(dt) +
                          ", but with discretization euler it must keep 1 + A*dt >= 0: " +
                          subject_name(v.subject) + " has K[" + c + "][" + c + "] = " +
                          format_value(v.k) + "; use a smaller dt or discretization: exact",
                      "grid.dt", format_value(dt), "");
  }
}

}  // namespace pkscan
