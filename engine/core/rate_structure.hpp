#pragma once
// How a model's rate matrix A depends on its parameter columns, for exact derivatives (the
// Predictor's sensitivities and GridGradient's): A = sum_m kappa_m B_m over the micro constants
// m, with kappa_m = p[m] when given and p[clearance] / p[volume of the flow's source compartment]
// otherwise. B_m is read from the model's declared flows (ModelInfo::flows), as rate_matrix()
// builds A from them.
#include <pkscan/models/model.hpp>
#include <vector>

namespace pkscan::detail {

struct RateStructure {
  std::vector<int> micro;              // micro-constant columns
  std::vector<std::vector<double>> b;  // per micro constant: n x n row-major
  std::vector<int> clearance;          // per micro constant: its clearance column, or -1
  std::vector<int> volume;             // per micro constant: source volume column, or -1
  std::vector<char> is_clearance;      // per column
  std::vector<char> is_source_volume;  // per column: the volume of some clearance conversion
};

// @throws Error when the flows of one micro constant name different clearances or sources (then A
// is not of that form, and pkscan cannot differentiate it)
RateStructure analyse_rates(const ModelInfo& m);

// Adds dA/dp_c (n x n, row-major) at the parameter row `p` to da[c * n * n ...] for every
// column c (the caller zeroes `da`, parameters * n * n values): B_m for a given micro constant,
// B_m / V and -B_m CL / V^2 for a clearance and its source volume.
void add_rate_derivatives(const RateStructure& rs, int n, const double* p, double* da);

}  // namespace pkscan::detail
