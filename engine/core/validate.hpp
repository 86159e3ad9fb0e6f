#pragma once
// Validation shared by check() and simulate(). Messages follow one shape:
// "<where>: <what> is <value>, but must be <rule>". Subjects are named 1-based ("subject 3").
#include <cstdint>
#include <pkscan/options.hpp>
#include <pkscan/types.hpp>
#include <string>

namespace pkscan::detail {

// Largest number of grid steps a run may have (a typo such as steps: 1e15 is rejected, not run).
constexpr std::int64_t kMaxSteps = 1'000'000'000;
// Largest number of repeats of one dose line.
constexpr std::int64_t kMaxRepeat = 100'000'000;

// Validates everything but the backend choice and the result size; with `parameters` false also
// not the parameter rows (GridGradient: the rows come with each evaluation).
void validate_problem(const Problem& p, bool parameters = true);

// Memory limit for the result: options.max_result_bytes or 80% of MemAvailable.
std::uint64_t result_limit(const SimulateOptions& o) noexcept;

[[noreturn]] void throw_domain(const std::string& where, const std::string& what,
                               const std::string& value, const std::string& rule);
[[noreturn]] void throw_invalid(const std::string& where, const std::string& what,
                                const std::string& value, const std::string& rule);

}  // namespace pkscan::detail
