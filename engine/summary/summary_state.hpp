#pragma once
// What the files of the per-time summaries share (time_summary.cpp, exposure_metrics.cpp,
// fused_summary.cpp): the summary's state (TimeSummary::Impl), where a chunk's concentrations
// come from, and the summation blocks of the means.
//
// Numeric contract (the user-facing rules are in pkscan/summary.hpp):
//  - sums: per row (output time x compartment), subjects are added in global subject order
//    within aligned blocks of kSubjectBlock = 1024 subjects, block sums are added in block order;
//  - histogram: integer increments; the window's position depends only on the largest key,
//    so the final state does not depend on the order in which values arrive (summary/sketch.hpp);
//  - metrics: per subject, the output times in order (summary/metric_lanes.hpp); each subject's
//    arithmetic does not depend on its chunk, its lane group or the thread running it.
// Results are therefore bit-identical for any chunking and thread count on one machine (the
// function clone chosen for the CPU is fixed). Every file holding this arithmetic is compiled
// with -ffp-contract=off (CMakeLists.txt).
#include <cstdint>
#include <memory>
#include <pkscan/result.hpp>
#include <pkscan/summary.hpp>
#include <pkscan/threads.hpp>
#include <vector>

#include "core/block.hpp"
#include "core/simd.hpp"
#include "kernels/summary.hpp"
#include "summary/refine.hpp"
#include "summary/sketch.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace pkscan {

namespace detail {

// Where a chunk's concentrations come from: a concentration array, or amounts times the
// reciprocal volume of the subject's compartment.
struct Source {
  const double* f64 = nullptr;  // values, subject-major (one of f64 / f32 is set)
  const float* f32 = nullptr;
  bool scale = false;  // multiply by 1 / volume
  const SimulationResult* r = nullptr;
  std::int64_t per_subject = 0;  // times * compartments
  int compartments = 0;
};

inline Source source_of(const SimulationResult& r) {
  Source s;
  s.r = &r;
  s.per_subject = r.times() * r.compartments();
  s.compartments = r.compartments();
  if (r.precision() == Precision::Float64) {
    if (!r.concentrations_f64().empty()) {
      s.f64 = r.concentrations_f64().data();
    } else {
      s.f64 = r.amounts_f64().data();
      s.scale = true;
    }
  } else if (!r.concentrations_f32().empty()) {
    s.f32 = r.concentrations_f32().data();
  } else {
    s.f32 = r.amounts_f32().data();
    s.scale = true;
  }
  return s;
}

// Reciprocal volume of one compartment of one subject (1 when the source is concentrations).
inline double inverse_volume(const Source& src, std::int64_t s, int c) {
  return src.scale ? 1.0 / src.r->volume(s, c) : 1.0;
}

// Concentration of subject s at row r (= time * compartments + compartment): the one formula
// every path uses.
inline double value_at(const Source& src, std::int64_t s, std::int64_t r) {
  const std::int64_t i = s * src.per_subject + r;
  const double x = src.f64 ? src.f64[i] : static_cast<double>(src.f32[i]);
  return src.scale ? x * inverse_volume(src, s, static_cast<int>(r % src.compartments)) : x;
}

// The 8 lane sums of one row, combined in a fixed tree.
PKSCAN_INLINE double lane_tree(const double* part, std::int64_t lane_stride) noexcept {
  return lane_tree8(part, lane_stride);
}

// End of a block of kSubjectBlock subjects for rows [r0, r1): the block's sum is added to the
// total, the lanes restart at zero.
inline void close_block(double* part, std::int64_t lane_stride, double* total, std::int64_t r0,
                        std::int64_t r1) noexcept {
  for (std::int64_t r = r0; r < r1; ++r) {
    total[r] += lane_tree(part + r, lane_stride);
    for (int l = 0; l < 8; ++l) part[r + l * lane_stride] = 0.0;
  }
}

}  // namespace detail

struct TimeSummary::Impl {
  std::vector<double> times;
  int compartments = 0;
  std::int64_t rows = 0;  // times * compartments
  TimeSummaryOptions opt;

  std::int64_t subjects = 0;  // passed to add()
  std::int64_t included = 0;
  std::int64_t excluded = 0;

  std::int64_t lane_stride = 0;  // rows + 8
  std::vector<double> part;      // current block's partial sums: 8 lanes x lane_stride
  std::vector<double> total;     // sum of completed blocks per row

  detail::Sketch sk;  // add()'s sketch
  // The fused summary's, one per thread.
  std::vector<std::unique_ptr<detail::Sketch, detail::SketchFree>> local;
  // The device summary's (device/summary_kernels.hpp), once it has run, and the spare its next
  // call copies the device's state into (FusedSummary::device_sketch).
  std::unique_ptr<detail::Sketch, detail::SketchFree> device, device_spare;

  bool exact = true;
  std::vector<double> kept;  // included subjects x rows, while exact
  std::int64_t kept_subjects = 0;

  // Capture (a rank's own summary in a run split over processes, FusedSummary::start_capture):
  // each call (add(), or a fused batch's commit) starts at subject 0, and the sums of its
  // complete blocks of kSubjectBlock subjects are kept per block in `captured` (block x rows)
  // instead of being added to `total`; its last incomplete block stays in `part`.
  bool capture = false;
  std::vector<double> captured;

  // The passes that make the sketch's percentiles exact (begin_pass); null before the first.
  std::unique_ptr<detail::Refinement> refine;

  // Every sketch holding values: add()'s, the fused kernel's and the device's.
  std::vector<const detail::Sketch*> sketches() const {
    std::vector<const detail::Sketch*> v{&sk};
    for (const auto& h : local) v.push_back(h.get());
    if (device) v.push_back(device.get());
    return v;
  }

  ~Impl() { detail::free_sketch(sk); }
};

}  // namespace pkscan
