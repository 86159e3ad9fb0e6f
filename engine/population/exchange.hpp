#pragma once
// The messages of a run split over several processes (RunExchange, pkscan/population_run.hpp):
// a simulated unit (its result and the columns its chunk carries), an error, "done", a sketch,
// a pass of exact percentiles' plan and values, a design run's replicate.
#include <cstdint>
#include <pkscan/design.hpp>
#include <pkscan/population_run.hpp>
#include <pkscan/result.hpp>
#include <pkscan/summary.hpp>
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
  // Rows formatted by the rank's sink (ResultSink::format): rank 0 appends `bytes`
  // (write_formatted), and the columns above are empty.
  bool formatted = false;
  std::vector<char> bytes;
  // A unit summarised by its rank (summarise_partial): its result carries no amounts, and rank 0
  // commits these sums (commit_partial).
  bool partial = false;
  std::vector<double> block_sums;  // complete blocks x rows
  std::vector<double> tail;        // rows x 8 lanes of the last incomplete block
  std::int64_t excluded = 0;
};

enum class MessageKind : std::uint8_t {
  Unit = 0,
  Error = 1,
  Done = 2,
  Sketch = 3,
  PassPlan = 4,
  PassValues = 5,
  DesignUnit = 6,
  Bytes = 7
};

// A unit's message: rows [first, first + result.subjects()), the result (amounts, volumes,
// statuses, summary) and the columns; `parameters` holds rows x model parameters.
void pack_unit(std::int64_t first, const SimulationResult& result, const UnitColumns& columns,
               const double* parameters, std::size_t parameter_values, std::vector<char>& message);

// The message of the exception being handled (call inside a catch block), for rank 0.
void pack_current_error(std::vector<char>& message);

void pack_done(std::vector<char>& message);

// A unit of run_units: its bytes, led by its kind; unpack_bytes replaces `bytes` with them (an
// error message of the rank is thrown, as by unpack_unit).
void pack_bytes(const std::vector<char>& bytes, std::vector<char>& message);
void unpack_bytes(const std::vector<char>& message, int from, std::vector<char>& bytes);

// Reads a message from rank `from`: a unit fills `result` and `columns` and returns its first
// row. An error message is thrown as an exception of its kind, its text led by "rank R: ";
// a "done" message where a unit was expected (or the reverse) is an Error.
// @throws Error for a malformed message
std::int64_t unpack_unit(const std::vector<char>& message, int from, SimulationResult& result,
                         UnitColumns& columns);
void unpack_done(const std::vector<char>& message, int from);

// Runs a split run's work on this rank (`body(rank)`, which returns its report) and ends it as
// every split run ends: a rank other than 0 reports "done", or its error, to rank 0 (and
// returns, or rethrows); rank 0 takes every other rank's report (throwing the first error, as
// unpack_done) and then calls `commit()`.
template <class Body, class Commit>
auto run_split(RunExchange& ex, Body&& body, Commit&& commit) {
  std::vector<char> message;
  if (ex.rank() != 0) {
    try {
      auto report = body();
      pack_done(message);
      ex.send(message);
      return report;
    } catch (...) {
      pack_current_error(message);
      ex.send(message);
      throw;
    }
  }
  auto report = body();
  for (int r = 1; r < ex.size(); ++r) {
    ex.receive(r, message);
    unpack_done(message, r);
  }
  commit();
  return report;
}

// A rank other than 0, once its unit `chunk` (which starts a block of its summary group) is added
// to `worker` (its summary of the group: exact_values 0, FusedSummary::start_capture): the
// unit's partial sums into `out`; `chunk`'s amounts are dropped (a run without trajectories).
void take_partial(TimeSummary& worker, SimulationResult& chunk, UnitColumns& out);
// Drops the result's amounts (a unit whose rows were formatted and that rank 0 does not
// summarise).
void drop_amounts(SimulationResult& result);
// Rank 0: the partial sums of a unit of n subjects into `summary` (whose next subject starts a
// block), as add() of the unit would have added them.
void commit_partial(TimeSummary& summary, std::int64_t n, const UnitColumns& in);
// The sketch of a worker's summary, and rank 0 adopting it into the group's summary.
void pack_sketch(const TimeSummary& worker, std::vector<char>& message);
void unpack_sketch(const std::vector<char>& message, int from, TimeSummary& summary);

// A replicate of a design run (run_design) simulated by a rank other than 0: its chunk's values
// (`parameters`, `etas` and `kappas` values per parameter-table row), and on rank 0 the
// replicate held for its sink. Returns the replicate's index; an error message of the rank is
// thrown, as by unpack_unit.
struct DesignUnit {
  DatasetResult result;
  std::vector<double> dv;
  std::vector<std::int8_t> blq;
  std::vector<std::int64_t> source, table_subject;
  std::vector<double> table_occasion, table_parameters, table_etas, table_kappas;
  DesignChunk chunk;  // points into the members above
  // Rows formatted by the rank's sink (DesignSink::format): rank 0 appends `bytes` of `rows`
  // observation rows, and only `result.summary` is filled besides.
  bool formatted = false;
  std::int64_t rows = 0;
  std::vector<char> bytes;
};
// `formatted`: the replicate's formatted rows, sent in place of its values (null: the values).
void pack_design_unit(const DesignChunk& chunk, int parameters, int etas, int kappas,
                      const std::vector<char>* formatted, std::vector<char>& message);
// @throws Error for a malformed message
std::int64_t unpack_design_unit(const std::vector<char>& message, int from, int parameters,
                                int etas, int kappas, DesignUnit& unit);

// Passes of exact percentiles split over the ranks (RunExchange::broadcast). Rank 0: the plan
// of the passes open on `summaries` (none open: the passes are over).
void pack_pass_plan(std::vector<TimeSummary>& summaries, std::vector<char>& message);
// Another rank: opens the plan's passes on its own summaries `workers` (as many as rank 0's, of
// the same output times and compartments); false when the plan opens none.
// @throws Error for a malformed plan
bool unpack_pass_plan(const std::vector<char>& message, std::vector<TimeSummary>& workers);
// Another rank: what the passes of `workers` found (their values and counts), for rank 0; the
// passes are closed.
void pack_pass_values(std::vector<TimeSummary>& workers, std::vector<char>& message);
// Rank 0: adds what rank `from` found to the passes open on `summaries`; an error message of
// the rank is thrown, as by unpack_unit.
// @throws Error for a malformed message
void unpack_pass_values(const std::vector<char>& message, int from,
                        std::vector<TimeSummary>& summaries);

}  // namespace pkscan::detail
