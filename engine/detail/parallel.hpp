#pragma once
// Exceptions and OpenMP: an exception leaving a parallel region calls std::terminate, and one
// that skips a worksharing loop on one thread deadlocks the others at its barrier. Bodies run
// through RegionError::guard, every thread still reaches every loop, and the first exception is
// rethrown after the region.
#include <exception>

namespace pkscan::detail {

class RegionError {
 public:
  template <class F>
  void guard(F&& f) noexcept {
    try {
      f();
    } catch (...) {
      capture();
    }
  }
  // True once some body has failed (later bodies may skip their work).
  bool failed() const noexcept { return static_cast<bool>(error_); }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void capture() noexcept {
#pragma omp critical(pkscan_region_error)
    if (!error_) error_ = std::current_exception();
  }
  std::exception_ptr error_;
};

}  // namespace pkscan::detail
