// Fuzz target: run files (YAML) through pkscan::config::parse_run_config, which parses the text,
// checks every key and value, reads the dataset / covariates files it names, builds the Problem
// and runs the engine's check() on it (nothing is simulated).
//
// Expected outcome for any input: a RunSpec or a pkscan::Error (ConfigError, BackendUnavailable,
// ...). Anything else is a finding: a crash, a sanitizer report, an exception that is not a
// pkscan::Error (it escapes this function: std::terminate, a crash for libFuzzer and a failure
// of the replay test), a hang or a leak.
//
// The run file is named tests/fuzz/files/run.yaml so that relative dataset / covariates paths
// resolve to the small files kept there. Skipped, as not parser bugs but costs of the harness:
// - inputs that could name a path under /dev, /proc or /sys (/dev/zero, /dev/stdin: endless or
//   blocking reads), also through YAML escapes (\x, \u, \U and \/ escapes are skipped);
// - inputs with a number above 10^6 anywhere: counts, steps and replicates that large make the
//   loader allocate legitimately (up to 80% of the available memory for a run that fits), which
//   is not what one fuzz input may cost. The "too large" rejections above that are covered by
//   the unit and CLI tests.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <pkscan/config/load.hpp>
#include <pkscan/error.hpp>
#include <string>

#ifndef PKSCAN_FUZZ_FILES_DIR
#error "PKSCAN_FUZZ_FILES_DIR must name tests/fuzz/files"
#endif

namespace {

// True for text that may name a path under /dev, /proc or /sys, also through YAML escapes.
bool may_name_special_file(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* s : {"/dev", "/proc", "/sys", "\\x", "\\u", "\\/"})
    if (text.find(s) != std::string::npos) return true;
  return false;
}

// True for text holding a number (as strtod reads it from any digit) above 10^6 in magnitude.
bool has_large_number(const std::string& text) {
  const char* p = text.c_str();
  const char* end = p + text.size();
  while (p < end) {
    if (std::isdigit(static_cast<unsigned char>(*p)) || *p == '.') {
      char* stop = nullptr;
      const double v = std::strtod(p, &stop);
      if (stop > p) {
        if (!(std::fabs(v) <= 1e6)) return true;
        p = stop;
        continue;
      }
    }
    ++p;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // The text may hold NUL bytes: strtod stops there, and the loader sees the whole string.
  if (may_name_special_file(text) || has_large_number(text)) return 0;
  try {
    const pkscan::config::RunSpec spec =
        pkscan::config::parse_run_config(text, PKSCAN_FUZZ_FILES_DIR "/run.yaml");
    // Touch what the loader produced (cheap; the sizes were checked by the loader).
    volatile std::int64_t sink = spec.problem.parameters.subjects() + spec.sweep.points();
    (void)sink;
  } catch (const pkscan::Error&) {
    // Bad input, reported as documented.
  }
  return 0;
}
