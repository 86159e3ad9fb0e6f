#pragma once
// Progress of long runs on stderr: a bar redrawn in place on a terminal, plain periodic lines
// otherwise. Nothing is shown for runs shorter than `delay` seconds; --quiet disables it.
#include <chrono>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace pkscan::cli {

class Progress {
 public:
  using Clock = std::function<double()>;  // seconds since an arbitrary origin
  // `terminal`: draw a bar with carriage returns; else print a line every `interval` seconds.
  Progress(std::ostream& err, bool terminal, std::string unit, double delay = 2.0,
           double interval = 10.0, Clock clock = {});
  // Reports `done` of `total` units.
  void update(std::int64_t done, std::int64_t total);
  // Ends the bar (a newline after a drawn bar; a final line if lines were printed).
  void finish();
  // Number of times something was written (for tests).
  int writes() const noexcept { return writes_; }

 private:
  double now() const;
  std::string line(std::int64_t done, std::int64_t total, double elapsed) const;
  std::ostream& err_;
  bool terminal_;
  std::string unit_;
  double delay_, interval_;
  Clock clock_;
  double start_;
  double last_ = -1e300;
  bool drawn_ = false;
  int writes_ = 0;
  std::int64_t done_ = 0, total_ = 0;
};

// True when file descriptor 2 is a terminal.
bool stderr_is_terminal();

}  // namespace pkscan::cli
