#pragma once
// Validation shared by check() and simulate(). Messages follow one shape:
// "<where>: <what> is <value>, but must be <rule>". Subjects are named 1-based ("subject 3").
#include <cstdint>
#include <pkscan/options.hpp>
#include <pkscan/types.hpp>
#include <string>
#include <vector>

namespace pkscan::detail {

// Largest number of grid steps a run may have (a typo such as steps: 1e15 is rejected, not run).
constexpr std::int64_t kMaxSteps = 1'000'000'000;
// Largest number of repeats of one dose line.
constexpr std::int64_t kMaxRepeat = 100'000'000;

// Validates everything but the backend choice and the result size; with `parameters` false also
// not the parameter rows (GridGradient: the rows come with each evaluation). `threads` as
// check_parameter_rows's.
void validate_problem(const Problem& p, bool parameters = true, int threads = 0);

// Results up to this size are not checked against the memory available (check() in engine.cpp).
constexpr std::uint64_t kUncheckedResultBytes = std::uint64_t{64} << 20;

// Memory limit for the result: options.max_result_bytes, or 80% of MemAvailable or of what the
// address-space limit (RLIMIT_AS) leaves the process, whichever is less.
std::uint64_t result_limit(const SimulateOptions& o) noexcept;

[[noreturn]] void throw_domain(const std::string& where, const std::string& what,
                               const std::string& value, const std::string& rule);
[[noreturn]] void throw_invalid(const std::string& where, const std::string& what,
                                const std::string& value, const std::string& rule);

// The field path of the value an error is about (Error::field(), error.hpp).
struct At {
  std::string field;
};
// The same errors about the value at `at.field`.
[[noreturn]] void throw_domain(const At& at, const std::string& where, const std::string& what,
                               const std::string& value, const std::string& rule);
// Summary percentiles: each in [0, 100] and, with `increasing`, each greater than the one before
// (field NAME[i]). TimeSummary and run_population apply it.
void check_percentiles(const std::string& where, const std::vector<double>& percentiles,
                       bool increasing, const std::string& name = "percentiles");

[[noreturn]] void throw_invalid(const At& at, const std::string& where, const std::string& what,
                                const std::string& value, const std::string& rule);

}  // namespace pkscan::detail
