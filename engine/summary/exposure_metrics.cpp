// Exposure metrics of a simulated chunk (subject_metrics): the metric kernels of
// summary/metric_lanes.hpp, eight subjects at a time, run over a chunk's concentrations.
#include <algorithm>
#include <limits>
#include <pkscan/summary.hpp>

#include "summary/metric_lanes.hpp"
#include "core/parallel.hpp"
#include "summary/summary_state.hpp"
#include "core/validate.hpp"

namespace pkscan {

using namespace detail;

namespace {

// Standalone metrics of subjects [s_first, s_last), 8 at a time (idle lanes of the last group
// repeat its last subject and are not written).
template <class Real>
PKSCAN_INLINE void metrics_body(const Source& src, const Real* data, std::int64_t s_first,
                                std::int64_t s_last, int mc, std::int64_t i0,
                                const std::vector<double>& times, double* out) {
  const int C = src.compartments;
  const std::int64_t T = src.per_subject / C;
  MetricLanes L;
  for (std::int64_t s0 = s_first; s0 < s_last; s0 += 8) {
    const Real* x[8];
    v8d inv;
    for (int l = 0; l < 8; ++l) {
      const std::int64_t s = std::min(s0 + l, s_last - 1);
      x[l] = data + s * src.per_subject + mc;
      inv[l] = inverse_volume(src, s, mc);
    }
    v8d c;
    for (int l = 0; l < 8; ++l) c[l] = static_cast<double>(x[l][0]);
    metric_first(c * inv, times[0], 0 >= i0, L);
    for (std::int64_t k = 1; k < T; ++k) {
      for (int l = 0; l < 8; ++l) c[l] = static_cast<double>(x[l][k * C]);
      const double t = times[static_cast<std::size_t>(k)];
      metric_next(c * inv, t, t - times[static_cast<std::size_t>(k - 1)], k >= i0, L);
    }
    for (int l = 0; l < 8 && s0 + l < s_last; ++l) {
      const std::int64_t s = s0 + l;
      metric_out(L, l, src.r->status()[static_cast<std::size_t>(s)] == SubjectStatus::Ok,
                 out + s * kMetricCount);
    }
  }
}

PKSCAN_CLONES void metrics_f64(const Source& src, std::int64_t a, std::int64_t b, int mc,
                               std::int64_t i0, const std::vector<double>& times, double* out) {
  metrics_body<double>(src, src.f64, a, b, mc, i0, times, out);
}
PKSCAN_CLONES void metrics_f32(const Source& src, std::int64_t a, std::int64_t b, int mc,
                               std::int64_t i0, const std::vector<double>& times, double* out) {
  metrics_body<float>(src, src.f32, a, b, mc, i0, times, out);
}

}  // namespace

std::vector<std::string> metric_names() {
  return std::vector<std::string>(kMetricNames.begin(), kMetricNames.end());
}

double last_dose_time(const std::vector<DoseEvent>& doses) noexcept {
  double last = std::numeric_limits<double>::quiet_NaN();
  for (const DoseEvent& d : doses) {
    const double t = d.time + static_cast<double>(d.repeat) * d.every;
    if (!(last >= t)) last = t;
  }
  return last;
}

void subject_metrics(const SimulationResult& chunk, int compartment, double last_dose, double* out,
                     int threads) {
  const char* where = "subject_metrics";
  if (compartment < 0 || compartment >= chunk.compartments())
    detail::throw_invalid(where, "compartment", std::to_string(compartment),
                          "in [0, " + std::to_string(chunk.compartments()) + ")");
  if (threads < 0) detail::throw_invalid(where, "threads", std::to_string(threads), ">= 0");
  const std::int64_t S = chunk.subjects();
  if (S == 0) return;
  if (!out) detail::throw_invalid(where, "out", "null", "not null");
  if (chunk.times() == 0) {
    std::fill(out, out + S * kMetricCount, std::numeric_limits<double>::quiet_NaN());
    return;
  }
  const Source src = source_of(chunk);
  const std::int64_t i0 = first_index_at_or_after(chunk.output_times(), last_dose);
  constexpr std::int64_t kGroup = 16;
  const std::int64_t groups = (S + kGroup - 1) / kGroup;
  const int nt = resolve_threads(threads);
  static_cast<void>(nt);  // read by the OpenMP pragma only
  detail::RegionError error;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t a = g * kGroup, b = std::min(S, a + kGroup);
    error.guard([&] {
      if (src.f64)
        metrics_f64(src, a, b, compartment, i0, chunk.output_times(), out);
      else
        metrics_f32(src, a, b, compartment, i0, chunk.output_times(), out);
    });
  }
  error.rethrow();
}

}  // namespace pkscan
