#pragma once
// What the event walk (walk_kernels.hpp) reads and writes: a dataset's plans as plain arrays,
// uploaded once (the Predictor's plans do not change between calls), the parameter rows of one
// call, and the predictions it writes (the Predictor), or whole output rows (simulate_dataset,
// in chunks of subjects). Plain structs, so that the host side fills them without seeing the
// kernel.
#include <cstdint>

#include "kernels/event.hpp"

namespace pkscan::device {

// A dataset record as the walk reads it: the walk makes the subject's events from its records
// (kernels/event.hpp's record_events, the CPU plan's own code).
using WalkRecord = detail::EventRecord;

// One subject's plan: offsets into the arrays of a launch.
struct WalkSubject {
  std::int64_t events = 0;        // number of events its records make (SubjectPlan::event_count)
  std::int64_t records = 0;       // first record
  std::int64_t record_count = 0;  // number of records (at least one)
  std::int64_t scratch = 0;       // first scratch event (room for events + lag boundaries)
  std::int64_t out = 0;           // first prediction (Predictor::observation_offset), or first
                                  // output row within the chunk (simulate_dataset)
  std::int64_t infusion_ids = 0;  // ids 0.. are the infusion doses; steady-state runs follow
  double last_obs = 0.0;          // nothing after the last observation is reported
};

// The model's columns the walk reads from a parameter row.
struct WalkModel {
  std::int32_t np = 0;  // parameters per row
  std::int32_t f_col[6] = {};
  std::int32_t lag_col[6] = {};
  std::int32_t vol_col[6] = {};
};

// Layout of one parameter row of a call (WalkChunk::row_stride doubles): the row's values (np),
// then A (row-major n x n), V, V^-1 and the structural-zero mask (column-major n x n each) and the
// eigenvalues (n) of A = V diag(lambda) V^-1 (events/event_list.hpp's Propagator, fast path);
// with sensitivities then E~_k = V^-1 dA/dp_k V (column-major n x n) for the subject's directions
// k that move A (events/solver_impl.hpp's setup_row).
PKSCAN_HD inline std::int64_t row_stride(int n, int np) { return np + 4 * n * n + n; }

enum : std::uint8_t {
  kWalkOk = 0,         // every prediction written
  kWalkHost = 1,       // not run: a row has no fast eigendecomposition or a list ran out of room
                       // (the host's solver runs the subject)
  kWalkNonFinite = 2,  // full rows: every row written, but some amount is not finite
};

// One launch over subjects [0, subjects).
struct WalkChunk {
  WalkModel model;
  std::int64_t row_stride = 0;  // doubles per row (row_stride(), plus the E~_k with sensitivities)
  std::int64_t subjects = 0;
  const WalkSubject* subject = nullptr;
  const WalkRecord* records = nullptr;
  const std::int64_t* first_row = nullptr;  // per subject: its first row in `rows`, or -1: host
  const double* rows = nullptr;             // the call's rows (row_stride each)
  detail::Event* scratch = nullptr;         // the subjects' events in processing order
  double* prediction = nullptr;             // per observation
  // Full rows (simulate_dataset), when set: per observation also the amounts and concentrations
  // (n each, with the volumes of the record's parameter row).
  double* amounts = nullptr;
  double* concentrations = nullptr;
  std::uint8_t* status = nullptr;  // per subject: kWalkOk, kWalkHost or kWalkNonFinite
  // Sensitivities (events/solver_impl.hpp's forward sensitivities, fast path), with jacobian:
  const std::uint64_t* overridden = nullptr;  // per row (first_row order): bit c: from the dataset
  const std::int32_t* directions = nullptr;   // per subject np + 3 values: pa, ps, p, the columns
  double* jacobian = nullptr;                 // per observation np values (row-major)
};

}  // namespace pkscan::device
