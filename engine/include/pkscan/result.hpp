#pragma once
/// @file result.hpp
/// What simulate() returns.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <pkscan/backend.hpp>
#include <pkscan/types.hpp>
#include <string>
#include <vector>

namespace pkscan {

/// Numerical outcome of one subject. Numerical trouble is reported here, never thrown.
enum class SubjectStatus : std::uint8_t {
  Ok,         ///< all reported values finite
  NonFinite,  ///< some reported value is NaN or infinite (overflow, bad transition matrix)
};

/// How a run went: which path ran, on how many threads, how long it took.
struct RunSummary {
  Method method = Method::Scan;          ///< method that ran (never Auto)
  Device device = Device::Cpu;           ///< device that ran (never Auto)
  int threads = 1;                       ///< CPU threads used
  double prepare_seconds = 0.0;          ///< building transition matrices and schedules
  double scan_seconds = 0.0;             ///< the recurrence itself
  std::int64_t non_finite_subjects = 0;  ///< subjects whose status is NonFinite
  /// A fused summaries-only call (Engine::summarize_into on the fused path; 0 otherwise): the
  /// seconds its threads spent, summed over threads, in the recurrence, in the per-time sums and
  /// the percentile sketch, and in the exposure metrics. What the call's threads x scan_seconds
  /// holds beyond them is the transitions, the statuses and the block sums.
  double fused_recurrence_seconds = 0.0;
  double fused_sums_seconds = 0.0;     ///< see fused_recurrence_seconds
  double fused_metrics_seconds = 0.0;  ///< see fused_recurrence_seconds
  /// Device 'cuda' (0 otherwise): seconds of the kernels, and of the copies (the transitions up;
  /// the results down through the staging buffers, including the stream's waits for the host to
  /// empty them), timed by device events on each chunk's stream and summed over the chunks. One
  /// chunk's kernel overlaps another chunk's copies, so the two can add up to more than
  /// scan_seconds.
  double device_kernel_seconds = 0.0;
  double device_transfer_seconds = 0.0;  ///< see device_kernel_seconds
  /// Datasets on device 'cuda' (simulate_dataset): subjects the device left to the host's event
  /// solver in the same call (a parameter row without a fast eigendecomposition, or more than 32
  /// infusions running at once); 0 otherwise.
  std::int64_t device_host_subjects = 0;
};

/// A contiguous array whose storage is not zero-filled when it grows (results are written once
/// by the compute path; zero-filling first would double the memory traffic) and is kept across
/// reuse (simulate_into). Copies are deep.
template <class T>
class Array {
 public:
  Array() = default;
  Array(const Array& o) { assign(o); }
  Array& operator=(const Array& o) {
    if (this != &o) assign(o);
    return *this;
  }
  Array(Array&&) noexcept = default;
  Array& operator=(Array&&) noexcept = default;
  /// Number of elements.
  std::size_t size() const noexcept { return size_; }
  /// True when there are no elements.
  bool empty() const noexcept { return size_ == 0; }
  /// First element.
  const T* data() const noexcept { return data_.get(); }
  /// First element.
  T* data() noexcept { return data_.get(); }
  /// Element i (no bounds check).
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  /// Iteration.
  const T* begin() const noexcept { return data_.get(); }
  /// Iteration.
  const T* end() const noexcept { return data_.get() + size_; }
  /// Sets the size; contents are unspecified. Reuses storage when it is large enough.
  void resize_uninitialized(std::size_t n) {
    if (n > capacity_) {
      data_.reset();
      data_.reset(new T[n]);  // default-initialised: no zero fill
      capacity_ = n;
    }
    size_ = n;
  }
  /// Frees the storage.
  void clear() noexcept {
    data_.reset();
    size_ = capacity_ = 0;
  }

 private:
  void assign(const Array& o) {
    resize_uninitialized(o.size_);
    if (o.size_) std::copy(o.begin(), o.end(), data_.get());
  }
  std::unique_ptr<T[]> data_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

/// Amounts (and, if asked, concentrations) of every subject at every output time.
///
/// Layout: subject-major, then output time, then compartment:
/// index = (subject * times() + time_index) * compartments() + compartment.
/// For Precision::Float64 the *_f64 arrays are filled, for Float32 the *_f32 arrays.
class SimulationResult {
 public:
  /// Number of subjects.
  std::int64_t subjects() const noexcept { return subjects_; }
  /// Number of output times.
  std::int64_t times() const noexcept { return static_cast<std::int64_t>(output_times_.size()); }
  /// Number of compartments.
  int compartments() const noexcept { return compartments_; }
  /// Precision of the stored arrays.
  Precision precision() const noexcept { return precision_; }
  /// Output times.
  const std::vector<double>& output_times() const noexcept { return output_times_; }
  /// Grid index of each output time.
  const std::vector<std::int64_t>& output_steps() const noexcept { return output_steps_; }
  /// Amount in `compartment` of `subject` at output time `time_index`.
  double amount(std::int64_t subject, std::int64_t time_index, int compartment) const noexcept;
  /// Concentration (amount / volume), computed from the amount whether or not the
  /// concentration arrays were filled.
  double concentration(std::int64_t subject, std::int64_t time_index,
                       int compartment) const noexcept;
  /// Volume of `compartment` for `subject`.
  double volume(std::int64_t subject, int compartment) const noexcept {
    return volumes_[static_cast<std::size_t>(subject * compartments_ + compartment)];
  }
  /// Amounts, float64 runs (empty for float32 runs).
  const Array<double>& amounts_f64() const noexcept { return amounts_f64_; }
  /// Amounts, float32 runs (empty for float64 runs).
  const Array<float>& amounts_f32() const noexcept { return amounts_f32_; }
  /// Concentrations, float64 runs with SimulateOptions::concentrations.
  const Array<double>& concentrations_f64() const noexcept { return conc_f64_; }
  /// Concentrations, float32 runs with SimulateOptions::concentrations.
  const Array<float>& concentrations_f32() const noexcept { return conc_f32_; }
  /// Per-subject numerical status.
  const std::vector<SubjectStatus>& status() const noexcept { return status_; }
  /// Which path ran and how long it took.
  const RunSummary& summary() const noexcept { return summary_; }

  /// Per-subject dose scaling (a linear model's amounts are linear in its doses): multiplies
  /// every amount and concentration of subject s by factors[s] (subjects() values).
  void scale_subjects(const double* factors) noexcept;
  /// Superposition of dose lines: adds `other`'s amounts and concentrations, subject s's
  /// multiplied by factors[s]; a subject is Ok only when it is Ok in both.
  /// @throws InvalidArgument when `other` has other subjects, times, compartments or precision
  void add_scaled(const SimulationResult& other, const double* factors);

 private:
  friend class ResultBuilder;
  std::int64_t subjects_ = 0;
  int compartments_ = 0;
  Precision precision_ = Precision::Float64;
  std::vector<double> output_times_;
  std::vector<std::int64_t> output_steps_;
  std::vector<double> volumes_;
  Array<double> amounts_f64_;
  Array<float> amounts_f32_;
  Array<double> conc_f64_;
  Array<float> conc_f32_;
  std::vector<SubjectStatus> status_;
  RunSummary summary_;
};

}  // namespace pkscan
