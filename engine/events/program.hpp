#pragma once
// Programs of the device's dataset path (device/dataset_job.hpp): what the event solver records
// for a run of subjects (EventSolver::record_rows), in host memory.
#include <cstdint>
#include <vector>

#include "device/dataset_job.hpp"

namespace pkscan::detail {

struct DatasetProgram {
  std::vector<device::ProgramOp> ops;
  std::vector<double> reals;        // offsets in ops[].arg and .aux index this
  std::vector<std::int64_t> begin;  // per subject recorded, in order: its first operation
  void clear() {
    ops.clear();
    reals.clear();
    begin.clear();
  }
};

}  // namespace pkscan::detail
