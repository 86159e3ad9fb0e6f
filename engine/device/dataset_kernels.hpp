#pragma once
// The dataset kernel: one subject's program (dataset_job.hpp) replayed from a zero state, on
// whatever system it is built for (CUDA with nvcc in launch_cuda.cu, OpenMP with g++ in
// runtime_host.cpp). Every step's arithmetic is events/step_hd.hpp, the CPU event solver's, so
// the host system gives the CPU's bits; on CUDA exp and expm1 are CUDA's (within an ulp or two
// of glibc's), the only difference (launch_cuda.cu is built with --fmad=false).
// Deterministic: one call owns one subject.
#include <cstdint>

#include "device/dataset_job.hpp"
#include "events/step_hd.hpp"

namespace pkscan::device {

template <int N>
struct DatasetKernel {
  DatasetChunk c;

  PKSCAN_HD void operator()(std::int64_t j) const {
    double x[N];
    for (int i = 0; i < N; ++i) x[i] = 0.0;
    bool finite = true;
    double k[N * N], g[N * N], e[N], s[N];
    const double* reals = c.reals + c.base[j];
    for (std::int64_t q = c.begin[j]; q < c.begin[j + 1]; ++q) {
      const ProgramOp op = c.ops[q];
      const double* p = op.arg >= 0 ? reals + op.arg : reals;
      switch (op.kind) {
        case ProgramKind::StepEigen: {
          const double* r = op.aux >= 0 ? reals + op.aux : nullptr;
          detail::eigen_terms_hd<N>(p + 3 * N * N, op.value, e, s);
          detail::eigen_matrix_hd<N>(p, p + N * N, p + 2 * N * N, e, k);
          if (r != nullptr) detail::eigen_matrix_hd<N>(p, p + N * N, p + 2 * N * N, s, g);
          detail::step_state_hd<N>(k, g, x, r, x);
          break;
        }
        case ProgramKind::StepMatrix:
          detail::step_state_hd<N>(p, p + N * N, x, op.aux >= 0 ? reals + op.aux : nullptr, x);
          break;
        case ProgramKind::Bolus:
          x[op.cmt] += op.value;
          break;
        case ProgramKind::Zero:
          for (int i = 0; i < N; ++i) x[i] = 0.0;
          break;
        case ProgramKind::Set:
          for (int i = 0; i < N; ++i) x[i] = p[i];
          break;
        case ProgramKind::Add:
          for (int i = 0; i < N; ++i) x[i] += p[i];
          break;
        case ProgramKind::Observe: {
          const std::int64_t row = op.aux - c.first_row;
          for (int i = 0; i < N; ++i) {
            c.amounts[row * N + i] = x[i];
            c.concentrations[row * N + i] = x[i] / p[i];
            finite = finite && x[i] - x[i] == 0.0;  // false for inf and NaN
          }
          c.prediction[row] = x[op.cmt] / p[op.cmt];
          break;
        }
      }
    }
    c.finite[j] = finite ? 1 : 0;
  }
};

}  // namespace pkscan::device
