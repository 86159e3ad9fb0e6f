// The rows of a population run's chunk beyond its amounts (see run_rows.hpp).
#include "population/run_rows.hpp"

#include <algorithm>
#include <pkscan/threads.hpp>

#include "core/parallel.hpp"
#include "population/residual.hpp"

namespace pkscan::detail {

namespace {

// Observations with residual error per thread woken (observe_rows).
constexpr double kValuesPerThread = 4096.0;

// IPRED (the observed compartment's concentration, float64) and DV with the run's residual
// error for rows [first, first + n) of a chunk, and BLQ flags with an LLOQ.
template <class Real>
void observe_rows(const PopulationRun& run, const RunLayout& layout, const SimulationResult& r,
                  const Array<Real>& amounts, std::int64_t first, std::int64_t per_rep,
                  std::int64_t n_base, std::int64_t first_subject, double* ipred, double* dv,
                  std::int8_t* blq) {
  const ResidualError& e = *run.residual;
  const std::int64_t nt = r.times();
  const int nc = r.compartments();
  const int obs = layout.model->default_observation_compartment;
  const std::uint64_t seed = run.population->seed;
  const bool flag = layout.blq;
  const std::int64_t n = r.subjects();
  // As many threads as the values are worth waking (about 30 ns each: two normals).
  const int nthreads =
      detail::threads_for_work(resolve_threads(run.options.threads),
                               static_cast<double>(n) * static_cast<double>(nt), kValuesPerThread);
  static_cast<void>(nthreads);  // read by the OpenMP pragma only
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
  {
    std::vector<double> z(static_cast<std::size_t>(2 * nt));
#pragma omp for schedule(static)
    for (std::int64_t s = 0; s < n; ++s) {
      const std::int64_t row = first + s;
      residual_normals(seed, row / per_rep, first_subject + row % n_base, 2 * nt, z.data());
      const double v = r.volume(s, obs);
      for (std::int64_t t = 0; t < nt; ++t) {
        const std::size_t k = static_cast<std::size_t>(s * nt + t);
        const double c = static_cast<double>(amounts.data()[(s * nt + t) * nc + obs]) / v;
        const double e1 = z[static_cast<std::size_t>(2 * t)];
        const double e2 = z[static_cast<std::size_t>(2 * t + 1)];
        const double y = detail::observation(e, c, e1, e2);
        ipred[k] = c;
        dv[k] = y;
        if (flag) blq[k] = y < run.lloq ? 1 : 0;
      }
    }
  }
}

}  // namespace

void observe(const PopulationRun& run, const RunLayout& layout, const SimulationResult& r,
             std::int64_t first, std::int64_t n, std::int64_t per_rep, std::int64_t n_base,
             std::int64_t first_subject, std::vector<double>& ipred, std::vector<double>& dv,
             std::vector<std::int8_t>& blq) {
  const auto values = static_cast<std::size_t>(n * r.times());
  ipred.resize(values);
  dv.resize(values);
  blq.resize(layout.blq ? values : 0);
  if (r.precision() == Precision::Float64)
    observe_rows(run, layout, r, r.amounts_f64(), first, per_rep, n_base, first_subject,
                 ipred.data(), dv.data(), blq.data());
  else
    observe_rows(run, layout, r, r.amounts_f32(), first, per_rep, n_base, first_subject,
                 ipred.data(), dv.data(), blq.data());
}

std::vector<DosePart> dose_parts(const std::vector<DoseEvent>& doses,
                                 const std::vector<DoseScaling>& scaling) {
  std::vector<DosePart> parts;
  auto same = [](const DoseScaling* a, const DoseScaling* b) {
    if (a == nullptr || b == nullptr) return a == b;
    return a->covariate == b->covariate && a->band_edges == b->band_edges &&
           a->band_amounts == b->band_amounts;
  };
  for (std::size_t i = 0; i < doses.size(); ++i) {
    const DoseScaling* sc = nullptr;
    if (!scaling.empty() && scaling[i].covariate >= 0) sc = &scaling[i];
    auto it = std::find_if(parts.begin(), parts.end(),
                           [&](const DosePart& p) { return same(p.scaling, sc); });
    if (it == parts.end()) {
      parts.push_back(DosePart{sc, {}});
      it = parts.end() - 1;
    }
    DoseEvent d = doses[i];
    if (sc && !(sc->band_edges.empty() && sc->band_amounts.empty())) d.amount = 1.0;
    it->doses.push_back(d);
  }
  // The unscaled part first (its result is the one the others are added to, unscaled).
  std::stable_partition(parts.begin(), parts.end(),
                        [](const DosePart& p) { return p.scaling == nullptr; });
  return parts;
}

}  // namespace pkscan::detail
