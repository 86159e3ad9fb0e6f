#pragma once
// The plan of a dataset's events, built once per subject before any parameter is known: its
// event templates (arrivals, infusion stops, resets, steady states, observations), its records
// as the event list reads them, the parameter rows its dataset cells make, and what the
// likelihood reads. simulate_dataset() builds one per subject as it goes; the Predictor builds
// all of them once and keeps them. The device's event walk makes the events itself from the
// records, so its plans come from build_records, without events.
#include <cstdint>
#include <limits>
#include <memory>
#include <pkscan/dataset.hpp>
#include <pkscan/models/model.hpp>
#include <pkscan/options.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/rate_structure.hpp"
#include "events/event_list.hpp"

namespace pkscan::detail {

constexpr int kMaxColumns = 64;  // parameter columns (a bit mask per row); linear models have <= 54

// The parameter row of a run of records: the subject's row with these dataset cells written in.
struct RowTemplate {
  std::int64_t first_record = 0;                  // for messages
  std::vector<std::pair<int, double>> overrides;  // model column, value
  std::uint64_t overridden = 0;                   // bit c: column c comes from the dataset
};

// An event of a bolus_only plan as the solver's bolus walk reads it (its template, compact).
struct BolusStep {
  double time = 0.0;
  double amt = 0.0;       // doses: the record's AMT (before F)
  std::int32_t seq = 0;   // the record
  std::int32_t row = 0;   // observations: the output row within the subject
  std::int16_t cmt = 0;   // doses: the dosed compartment; observations: the observed one
  std::int16_t kind = 0;  // kDose, kObserve or kBoundary
  // The record whose row governs the interval ending here: the first at or after `time`.
  std::int32_t governing = 0;
};

struct SubjectPlan {
  // Sorted for lag 0 and f 1 (nearly sorted for others); empty from build_records (event_count
  // says how many there would be). Every record time bounds an interval
  // (its parameters govern the interval ending there); a lagged dose record's boundary is not
  // here but added by the solver, which knows the lag.
  std::vector<EventTemplate> events;
  std::int64_t event_count = 0;      // events.size(), or what it would be (build_records)
  std::vector<EventRecord> records;  // the subject's records as the event list reads them
  std::vector<int> row_of;           // per record: index into rows
  std::vector<RowTemplate> rows;
  std::int64_t infusion_ids = 0;  // ids 0.. are the infusion doses; steady-state runs follow
  // Dose records that need a boundary at their own time when lagged (no other event of theirs
  // is there then): the solver adds one per such record with lag != 0.
  std::size_t lag_boundaries = 0;
  double last_obs = -std::numeric_limits<double>::infinity();
  std::int64_t obs_offset = 0;
  std::int64_t obs_count = 0;
  std::vector<int> ll_obs;    // observations (0-based within the subject) in the likelihood
  std::vector<double> ll_dv;  // their DV
  std::vector<int> ll_line;   // their dataset lines (messages)
  // Every event a bolus dose (no infusion, steady state or reset), an observation or a
  // boundary: without lags, the solver walks the templates as they are (build_plan sets it).
  bool bolus_only = false;
  std::vector<BolusStep> bolus;  // with bolus_only: the events in order
  std::uint64_t dosed = 0;       // bit c: compartment c receives doses
  std::uint64_t observed = 0;    // bit c: compartment c is observed
};

// What every evaluation of one dataset under one model shares: the model, the dataset's
// parameter columns and, for sensitivities, how A depends on the parameters.
struct DatasetSetup {
  // Checks the model (1 to 6 compartments, at most kMaxColumns parameters) and the dataset's
  // parameter columns. `who` starts every message ("Predictor", "simulate_dataset").
  // @throws InvalidArgument for a model or column pkscan cannot serve
  DatasetSetup(const Dataset& dataset, std::shared_ptr<const ModelInfo> model_info,
               std::string who_name, bool sensitivities);

  const Dataset* data;
  std::shared_ptr<const ModelInfo> model;
  std::string who;
  int n = 0;
  int np = 0;
  std::vector<int> column_of;  // dataset parameter column -> model column
  std::vector<char> is_dataset_column;
  RateStructure rates;  // only with sensitivities
  // Largest number of events one subject's plan may hold (its memory, on every thread that
  // builds plans, within the memory limit: result_limit of the caller's options). Unbounded
  // until set_memory_limit; every caller that builds plans sets it once.
  std::int64_t max_events = std::numeric_limits<std::int64_t>::max();
  // Sets max_events from the memory limit and threads of `options`.
  void set_memory_limit(const SimulateOptions& options);

  // The plan of subject s; its observations are numbered from 0 within the subject. Additional
  // doses (ADDL) after the subject's last record are left out: nothing is reported after it.
  // @throws InvalidArgument for a record with the wrong number of parameter cells or a CMT the
  //         model does not have (naming the record): the dataset does not fit the model
  // @throws DomainError when the subject's events up to its last record exceed max_events
  // With `scratch`, the events are made there and a bolus_only plan keeps none (events empty,
  // event_count says how many; remake_events makes them again where a row lags a dose): for
  // plans kept in memory across many calls.
  void build_plan(std::int64_t s, SubjectPlan& plan,
                  std::vector<EventTemplate>* scratch = nullptr) const;
  // The plan of subject s without its events (they are counted: event_count), for the device's
  // event walk, which makes them itself from plan.records (record_events). @throws as build_plan
  void build_records(std::int64_t s, SubjectPlan& plan) const;
  // The plan of subject s without its events (not even counted): its records and parameter
  // rows, all that fill_rows and the checks of a dataset need. @throws as build_plan
  void plan_records(std::int64_t s, SubjectPlan& plan) const;
  // The parameter rows of subject s (plan.rows.size() rows of np values): its row `params`
  // with each row's dataset cells written in, every row checked (check_parameters).
  // @throws DomainError naming the first record of an invalid row
  void fill_rows(const SubjectPlan& plan, std::int64_t s, const double* params,
                 std::vector<double>& rows) const;
  // The sensitivity directions of a subject (with sensitivities only): the columns of its row
  // `params` whose derivative can be non-zero, in order: those that move A (pa of them), then F
  // and lag of its dosed compartments (up to ps), then the volumes of its observed ones. Writes
  // them to `col` (np at most) and returns how many.
  int directions(const SubjectPlan& plan, const double* params, int* col, int& pa, int& ps) const;
  // "<who>: FILE:LINE: ID "x" (subject k): msg" for record `record` of s.
  std::string locate(std::int64_t s, std::int64_t record, const std::string& msg) const;
  // @throws DomainError with locate()'s message
  [[noreturn]] void fail_record(std::int64_t s, std::int64_t record, const std::string& msg) const;
};

// An upper bound of the events record_events makes for a record with `addl` (>= 0) additional
// doses of infusion rate `rate`: its dose and infusion stop per dose, and a boundary or steady
// state. Plans are sized and checked against the memory limit by it.
inline long double record_event_bound(std::int64_t addl, double rate) {
  return 3.0L + static_cast<long double>(addl + 1) * (rate > 0.0 ? 2.0L : 1.0L);
}

// The events of a plan that keeps none (build_plan with a scratch), as build_plan makes them:
// into `out`, in order.
void remake_events(const SubjectPlan& plan, std::vector<EventTemplate>& out);

}  // namespace pkscan::detail
