#pragma once
// The messages of a run split over several processes (RunExchange, pkscan/population_run.hpp):
// a simulated unit (its result and the columns its chunk carries), an error, or "done".
#include <cstdint>
#include <pkscan/result.hpp>
#include <string>
#include <vector>

namespace pkscan::detail {

// What a unit carries besides its result: the Chunk's per-row columns.
struct UnitColumns {
  std::vector<std::int64_t> ids;
  std::vector<double> extra;
  std::vector<double> parameters;
  std::vector<double> metrics;
  std::vector<double> etas;
  std::vector<double> ipred;
  std::vector<double> dv;
  std::vector<std::int8_t> blq;
};

enum class MessageKind : std::uint8_t { Unit = 0, Error = 1, Done = 2 };

// A unit's message: rows [first, first + result.subjects()), the result (amounts, volumes,
// statuses, summary) and the columns; `parameters` holds rows x model parameters.
void pack_unit(std::int64_t first, const SimulationResult& result, const UnitColumns& columns,
               const double* parameters, std::size_t parameter_values, std::vector<char>& message);

// The message of the exception being handled (call inside a catch block), for rank 0.
void pack_current_error(std::vector<char>& message);

void pack_done(std::vector<char>& message);

// Reads a message from rank `from`: a unit fills `result` and `columns` and returns its first
// row. An error message is thrown as an exception of its kind, its text led by "rank R: ";
// a "done" message where a unit was expected (or the reverse) is an Error.
// @throws Error for a malformed message
std::int64_t unpack_unit(const std::vector<char>& message, int from, SimulationResult& result,
                         UnitColumns& columns);
void unpack_done(const std::vector<char>& message, int from);

}  // namespace pkscan::detail
