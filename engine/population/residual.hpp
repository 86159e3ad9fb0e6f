#pragma once
// The residual error of simulated observations, shared by population runs on a time grid and
// design runs on a dataset: its checks and the observation it makes from a prediction.
#include <cmath>
#include <pkscan/error.hpp>
#include <pkscan/population.hpp>
#include <string>
#include <utility>

namespace pkscan::detail {

// The simulated observation of prediction `ipred` with standard normals e1, e2
// (ResidualError's formula).
inline double observation(const ResidualError& e, double ipred, double e1, double e2) noexcept {
  return e.exponential > 0.0 ? ipred * std::exp(e.exponential * e1)
                             : ipred * (1.0 + e.proportional * e1) + e.additive * e2;
}

// Standard deviations finite and >= 0; exponential alone. Messages start with `who`; fields are
// `residual.<part>`.
inline void check_residual(const std::string& who, const ResidualError& e) {
  const std::pair<const char*, double> sds[] = {
      {"additive", e.additive}, {"proportional", e.proportional}, {"exponential", e.exponential}};
  for (const auto& [name, sd] : sds)
    if (!(std::isfinite(sd) && sd >= 0.0))
      throw DomainError(who + ": the residual error's " + name + " standard deviation is " +
                            format_value(sd) + ", but must be finite and >= 0",
                        std::string("residual.") + name, format_value(sd), "finite and >= 0");
  if (e.exponential > 0.0 && (e.additive > 0.0 || e.proportional > 0.0))
    throw InvalidArgument(who +
                              ": an exponential residual error cannot be combined with an "
                              "additive or proportional one",
                          "residual.exponential", format_value(e.exponential), "");
}

// An LLOQ: finite and >= 0 (field `lloq`).
inline void check_lloq(const std::string& who, double lloq) {
  if (!(std::isfinite(lloq) && lloq >= 0.0))
    throw DomainError(who + ": lloq is " + format_value(lloq) + ", but must be finite and >= 0",
                      "lloq", format_value(lloq), "finite and >= 0");
}

}  // namespace pkscan::detail
