#pragma once
// A dataset's event plans on device 'cuda', for the Predictor (Predictor::set_device): uploaded
// once, then evaluated many times with new parameters by the event walk
// (device/walk_kernels.hpp), one device thread per subject. Written once over a system's Runtime,
// so the host system runs every line of it in CI.
#include <cstdint>
#include <memory>
#include <vector>

#include "events/plan.hpp"

namespace pkscan::detail {

class DeviceEvents {
 public:
  // Uploads the plans of every subject (`plans`, with their observation offsets).
  // @throws BackendUnavailable when device 'cuda' has no usable device ("<who>: device 'cuda'
  //         is not available: ..."); DeviceError when the device fails
  DeviceEvents(const DatasetSetup& setup, const std::vector<SubjectPlan>& plans);
  ~DeviceEvents();
  DeviceEvents(const DeviceEvents&) = delete;
  DeviceEvents& operator=(const DeviceEvents&) = delete;

  // Predictions of every subject (the walk's: the CPU solver's, step for step) into `out`
  // (Predictor::observations() values) for the parameter rows `params` (subjects x np), and with
  // `jacobian` (observations x np, row-major) their Jacobian (the solver's forward sensitivities).
  // The host's threads (`threads`) check the rows and compute their eigendecompositions (and the
  // directions' E~_k); one launch runs every subject. The subjects the walk leaves to the host's
  // solver (walk_kernels.hpp) are returned in `host`, ascending; their rows of `out` and
  // `jacobian` are left for the host's solver to write (the walk may have written some).
  // @throws DomainError for invalid parameter values (the lowest failing subject's, as the CPU)
  void predict(const double* params, int threads, double* out, double* jacobian,
               std::vector<std::int64_t>& host);

  // Seconds of the last call's kernel and copies (device events around them).
  double kernel_seconds() const noexcept;
  double transfer_seconds() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pkscan::detail
