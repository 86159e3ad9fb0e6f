#pragma once
// What the dataset kernel (dataset_kernels.hpp) reads and writes: a program of state operations
// per subject, recorded on the host by the event solver (events/solver.cpp, record_rows), and
// the chunk of subjects one launch runs. Plain structs, so that the host side fills them without
// seeing the kernel.
//
// The event solver's logic (event order after lag and F, running infusions, resets, steady
// states, parameter rows) never depends on the state, so the host runs it once and records what
// it does to the state; the device replays the record, one thread per subject, and computes
// every step's K(d) and G(d) itself from the row's eigendecomposition (events/step_hd.hpp).
#include <cstdint>

namespace pkscan::device {

enum class ProgramKind : std::int32_t {
  StepEigen = 0,   // x <- K(value) x + G(value) r; reals[arg..]: V, V^-1, mask (column-major
                   // N x N each), lambda (N); aux: offset of r (N) or -1 when no infusion runs
  StepMatrix = 1,  // the same with K and G precomputed by the host (rows without a fast
                   // eigendecomposition): reals[arg..]: K, G (row-major N x N each)
  Bolus = 2,       // x[cmt] += value
  Zero = 3,        // x <- 0 (EVID 3 and 4)
  Set = 4,         // x <- reals[arg..arg + N) (SS=1 steady state)
  Add = 5,         // x += reals[arg..arg + N) (SS=2 steady state)
  Observe = 6,     // output row aux: amounts x, concentrations x / reals[arg..arg + N) (the
                   // volumes in force), prediction x[cmt] / reals[arg + cmt]
};

struct ProgramOp {
  double value = 0.0;     // StepEigen, StepMatrix: the interval's length; Bolus: the amount
  std::int64_t arg = -1;  // offset into the chunk's reals
  std::int64_t aux = -1;  // StepEigen: rates offset or -1; Observe: output row of the dataset
  ProgramKind kind = ProgramKind::Zero;
  std::int32_t cmt = 0;
};

// One launch: subjects [0, subjects) of a chunk. Subject j's operations are
// ops[begin[j] .. begin[j + 1]), and their offsets (arg, and aux of the steps) index
// reals + base[j] (the reals of the host thread's part that recorded it); its observation rows are
// written at (row - first_row).
struct DatasetChunk {
  std::int64_t subjects = 0;
  std::int64_t first_row = 0;
  const std::int64_t* begin = nullptr;  // subjects + 1
  const std::int64_t* base = nullptr;   // subjects
  const ProgramOp* ops = nullptr;
  const double* reals = nullptr;
  double* amounts = nullptr;         // rows x N
  double* concentrations = nullptr;  // rows x N
  double* prediction = nullptr;      // rows
  std::uint8_t* finite = nullptr;    // per subject: 1 when every amount written is finite
};

}  // namespace pkscan::device
