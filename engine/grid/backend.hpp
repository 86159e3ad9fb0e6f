#pragma once
// Internal backend interface. The public API validates once (check()) and hands backends a
// clean PreparedBatch; backends never re-validate and never throw for numerical trouble.
#include <cstdint>
#include <memory>
#include <pkscan/backend.hpp>
#include <pkscan/models/model.hpp>
#include <pkscan/result.hpp>
#include <pkscan/summary.hpp>
#include <pkscan/types.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dispatch.hpp"
#include "grid/schedule.hpp"

namespace pkscan::detail {

// A validated problem, flattened for the backends. The schedule is owned by the Engine (cached
// across calls with the same regimen and grid) and outlives the batch.
struct PreparedBatch {
  explicit PreparedBatch(const Schedule& s) : schedule(s) {}
  const Problem* problem = nullptr;
  const ModelInfo* model = nullptr;
  int n = 0;  // compartments
  std::int64_t subjects = 0;
  const Schedule& schedule;
  std::vector<std::int64_t> out_steps;  // sorted grid indices to report
  int threads = 1;                      // threads the backend may use
};

// The reciprocal volume of compartment c of subject s: what the summarising paths (the fused
// CPU path and the device summary) multiply amounts by, so both take it from here.
inline double reciprocal_volume(const PreparedBatch& b, std::int64_t s, int c) noexcept {
  return 1.0 / b.problem->parameters.get(s, b.model->volume_parameter[static_cast<std::size_t>(c)]);
}

// Where a backend writes: amounts, subject-major (subject, output time, compartment).
template <class Real>
struct ResultView {
  Real* amounts = nullptr;
  SubjectStatus* status = nullptr;
};

// What a summarising run feeds (Engine::summarize_into): the summary, the exposure metrics of
// one compartment and each subject's status.
struct SummaryTarget {
  TimeSummary* summary = nullptr;
  Precision precision = Precision::Float64;
  int metric_compartment = 0;
  double last_dose_time = 0.0;
  double* metrics = nullptr;        // subjects x kMetricCount
  SubjectStatus* status = nullptr;  // subjects
  double* seconds = nullptr;        // 3, or null: the fused path's parts (RunSummary::fused_*)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Method method() const noexcept = 0;
  virtual Device device() const noexcept = 0;
  // Empty when this backend can run the batch; otherwise why not (Auto then falls back).
  virtual std::string unsupported_reason(const PreparedBatch&) const { return {}; }
  virtual void run(const PreparedBatch& batch, ResultView<double> out) = 0;
  virtual void run(const PreparedBatch& batch, ResultView<float> out) = 0;

  // Summarising without storing the trajectories, a capability a backend may have (the batched
  // CPU backend's fused summary, fused_summary.cpp). can_summarize: true when summarize() can
  // add this batch to `summary`; by default no backend can, and the Engine runs run() and
  // TimeSummary::add instead (the same bits).
  virtual bool can_summarize(const PreparedBatch&, const TimeSummary&) const { return false; }
  // Simulates the batch and adds every subject to target.summary, writing the metrics and the
  // statuses. Called only when can_summarize() is true.
  virtual void summarize(const PreparedBatch&, const SummaryTarget&) {}
  // What the last run() spent on a device, timed by the device (RunSummary::device_*); zero for
  // the CPU backends.
  struct DeviceTimes {
    double kernel_seconds = 0.0;
    double transfer_seconds = 0.0;
  };
  virtual DeviceTimes last_device_times() const noexcept { return {}; }
};

// A CPU backend of `M` compiled for 2 to 4 compartments: Derived provides
//   template <int N, class Real> void run_all(const PreparedBatch&, ResultView<Real>);
// (public), and this class the rest of the interface.
template <class Derived, Method M>
class CompiledCpuBackend : public Backend {
 public:
  Method method() const noexcept override { return M; }
  Device device() const noexcept override { return Device::Cpu; }
  std::string unsupported_reason(const PreparedBatch& b) const override {
    if (b.n >= 2 && b.n <= 4) return {};
    return "method '" + to_string(M) + "' is compiled for 2 to 4 compartments";
  }
  void run(const PreparedBatch& b, ResultView<double> out) override { dispatch(b, out); }
  void run(const PreparedBatch& b, ResultView<float> out) override { dispatch(b, out); }

 private:
  template <class Real>
  void dispatch(const PreparedBatch& b, ResultView<Real> out) {
    Derived& self = static_cast<Derived&>(*this);
    with_compartments_2_to_4(
        b.n, [&](auto n) { self.template run_all<decltype(n)::value, Real>(b, out); });
  }
};

// The one factory. Throws BackendUnavailable for a method/device not in this build.
std::unique_ptr<Backend> make_backend(Method method, Device device);

// The reference per-subject loop: builds the subject's transition and scans it. Shared by the
// reference backend and the per-subject fallback of faster backends (same function, same bits).
template <class Real>
void reference_subject(const PreparedBatch& batch, std::int64_t subject, Real* out,
                       SubjectStatus* status);

// The instruction sets the batched backend compiles its blocks for (x86-64 with GCC: AVX-512,
// AVX2 and baseline; elsewhere baseline only): the blocks run on the best the machine has,
// unless capped. For tests, which run every set the machine has: cap_batched_isa(k) makes them
// run on the k-th set counting down from the machine's best (1: the best; 0: no cap) and
// returns how many sets the machine has (the last is the baseline). Not for concurrent use.
int cap_batched_isa(int k);

}  // namespace pkscan::detail
