#include "progress.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <sstream>

namespace pkscan::cli {

namespace {

std::string human_seconds(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  std::ostringstream o;
  const auto t = static_cast<long long>(std::llround(s));
  if (t >= 3600)
    o << t / 3600 << "h" << (t % 3600) / 60 << "m";
  else if (t >= 60)
    o << t / 60 << "m" << t % 60 << "s";
  else
    o << t << "s";
  return o.str();
}

std::string human_rate(double r) {
  char buf[32];
  if (r >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1fM", r / 1e6);
  else if (r >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", r / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", r);
  return buf;
}

}  // namespace

bool stderr_is_terminal() { return ::isatty(2) == 1; }

Progress::Progress(std::ostream& err, bool terminal, std::string unit, double delay,
                   double interval, Clock clock)
    : err_(err),
      terminal_(terminal),
      unit_(std::move(unit)),
      delay_(delay),
      interval_(interval),
      clock_(std::move(clock)),
      start_(now()) {}

double Progress::now() const {
  if (clock_) return clock_();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Progress::line(std::int64_t done, std::int64_t total, double elapsed) const {
  const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  const double left = rate > 0 ? static_cast<double>(total - done) / rate : -1.0;
  std::ostringstream o;
  if (terminal_) {
    constexpr int kWidth = 30;
    const int full = static_cast<int>(frac * kWidth);
    o << "[" << std::string(static_cast<std::size_t>(full), '#')
      << std::string(static_cast<std::size_t>(kWidth - full), '.') << "] ";
  } else {
    o << "pkscan: progress: ";
  }
  o << static_cast<int>(frac * 100) << "% " << done << "/" << total << " " << unit_ << ", "
    << human_rate(rate) << " " << unit_ << "/s, " << human_seconds(left) << " left";
  return o.str();
}

void Progress::update(std::int64_t done, std::int64_t total) {
  done_ = done;
  total_ = total;
  const double t = now();
  const double elapsed = t - start_;
  if (elapsed < delay_) return;
  if (terminal_) {
    if (t - last_ < 0.1 && done < total) return;  // at most 10 redraws a second
    err_ << "\r" << line(done, total, elapsed) << "\x1b[K" << std::flush;
    drawn_ = true;
  } else {
    if (t - last_ < interval_) return;
    err_ << line(done, total, elapsed) << "\n" << std::flush;
  }
  last_ = t;
  ++writes_;
}

void Progress::finish() {
  if (terminal_ && drawn_) {
    err_ << "\r" << line(done_, total_, now() - start_) << "\x1b[K\n" << std::flush;
    ++writes_;
  } else if (!terminal_ && writes_ > 0 && done_ == total_) {
    err_ << line(done_, total_, now() - start_) << "\n" << std::flush;
    ++writes_;
  }
}

}  // namespace pkscan::cli
