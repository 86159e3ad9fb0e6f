// Event plans of datasets (plan.hpp).
#include "events/plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <pkscan/error.hpp>
#include <pkscan/threads.hpp>

#include "core/validate.hpp"

namespace pkscan::detail {

DatasetSetup::DatasetSetup(const Dataset& dataset, std::shared_ptr<const ModelInfo> model_info,
                           std::string who_name, bool sensitivities)
    : data(&dataset), model(std::move(model_info)), who(std::move(who_name)) {
  if (!model) throw InvalidArgument(who + ": the model is null");
  const ModelInfo& m = *model;
  if (m.kind == ModelKind::Linear && m.compartments.empty())
    throw InvalidArgument(who +
                          ": the linear model has no compartments; build it with "
                          "make_linear_model()");
  n = static_cast<int>(m.compartments.size());
  np = static_cast<int>(m.parameters.size());
  if (n < 1 || n > 6) throw InvalidArgument(who + ": model " + m.name + " has an unsupported size");
  if (np > kMaxColumns)
    throw InvalidArgument(who + ": model " + m.name + " has " + std::to_string(np) +
                          " parameters, but at most " + std::to_string(kMaxColumns) +
                          " are supported");
  is_dataset_column.assign(static_cast<std::size_t>(np), 0);
  for (const std::string& name : data->parameter_columns) {
    const int col = parameter_index(m, name);
    if (col < 0)
      throw InvalidArgument(who + ": dataset column " + name + " is not a parameter of " + m.name);
    column_of.push_back(col);
    is_dataset_column[static_cast<std::size_t>(col)] = 1;
  }
  if (sensitivities) rates = analyse_rates(m);
}

void DatasetSetup::set_memory_limit(const SimulateOptions& options) {
  const std::uint64_t per_thread =
      result_limit(options) /
      static_cast<std::uint64_t>(std::max(1, resolve_threads(options.threads)));
  max_events = static_cast<std::int64_t>(
      std::min<std::uint64_t>(per_thread / sizeof(EventTemplate), std::uint64_t{1} << 62));
}

std::string DatasetSetup::locate(std::int64_t s, std::int64_t record,
                                 const std::string& msg) const {
  const DatasetSubject& sub = data->subjects[static_cast<std::size_t>(s)];
  return who + ": " + data->file + ":" +
         std::to_string(sub.records[static_cast<std::size_t>(record)].line) + ": ID \"" + sub.id +
         "\" (subject " + std::to_string(s + 1) + "): " + msg;
}

void DatasetSetup::fail_record(std::int64_t s, std::int64_t record, const std::string& msg) const {
  throw DomainError(locate(s, record, msg));
}

namespace {

// Sorts by detail::before, stably (events with equal keys keep the order they were made in).
// Records are in time order, so the events nearly are too (only ADDL doses and infusion stops
// land later): an insertion sort is about linear then. When it is not (long ADDL runs), the
// insertion sort gives up and std::stable_sort finishes: the same order either way.
void sort_events(std::vector<EventTemplate>& ev) {
  const std::size_t budget = 8 * ev.size() + 64;
  std::size_t moves = 0;
  for (std::size_t i = 1; i < ev.size(); ++i) {
    if (!before(ev[i].e, ev[i - 1].e)) continue;
    const EventTemplate t = ev[i];
    std::size_t j = i;
    for (; j > 0 && before(t.e, ev[j - 1].e); --j) ev[j] = ev[j - 1];
    ev[j] = t;
    moves += i - j;
    if (moves > budget) {
      std::stable_sort(ev.begin(), ev.end(), [](const EventTemplate& a, const EventTemplate& b) {
        return before(a.e, b.e);
      });
      return;
    }
  }
}

}  // namespace

int DatasetSetup::directions(const SubjectPlan& plan, const double* params, int* col, int& pa,
                             int& ps) const {
  const ModelInfo& m = *model;
  std::uint64_t taken = 0;  // bit c: column c is a direction
  int p = 0;
  const auto add = [&](int c) {
    if (c < 0 || std::isnan(params[c]) || ((taken >> c) & 1u)) return;
    taken |= std::uint64_t{1} << c;
    col[p++] = c;
  };
  for (std::size_t i = 0; i < rates.micro.size(); ++i) {
    add(rates.micro[i]);
    const int c = rates.clearance[i];
    if (c >= 0 && (!std::isnan(params[c]) || is_dataset_column[static_cast<std::size_t>(c)])) {
      add(c);
      add(rates.volume[i]);
    }
  }
  pa = p;
  for (int c = 0; c < n; ++c)
    if ((plan.dosed >> c) & 1u) {
      add(m.f_parameter[static_cast<std::size_t>(c)]);
      add(m.lag_parameter[static_cast<std::size_t>(c)]);
    }
  ps = p;
  for (int c = 0; c < n; ++c)
    if ((plan.observed >> c) & 1u) add(m.volume_parameter[static_cast<std::size_t>(c)]);
  return p;
}

void DatasetSetup::fill_rows(const SubjectPlan& plan, std::int64_t s, const double* params,
                             std::vector<double>& rows) const {
  const std::size_t width = static_cast<std::size_t>(np);
  rows.resize(plan.rows.size() * width);
  for (std::size_t t = 0; t < plan.rows.size(); ++t) {
    double* row = rows.data() + t * width;
    std::copy(params, params + width, row);
    for (const auto& [col, v] : plan.rows[t].overrides) row[col] = v;
    const ParameterViolation v = parameter_violation(*model, row);
    if (!v) continue;
    // A value from the parameter batch, not from a dataset column, also names its field (the
    // run-file loader reports it at the value's node).
    // A dataset column's empty cell with no value in the batch is the dataset's too.
    bool from_dataset =
        is_dataset_column[static_cast<std::size_t>(v.column)] != 0 && std::isnan(params[v.column]);
    for (const auto& o : plan.rows[t].overrides) from_dataset = from_dataset || o.first == v.column;
    if (from_dataset) fail_record(s, plan.rows[t].first_record, v.message);
    throw DomainError(locate(s, plan.rows[t].first_record, v.message),
                      "parameters[" + std::to_string(s) + "]." +
                          model->parameters[static_cast<std::size_t>(v.column)].name,
                      v.value, v.rule);
  }
}

namespace {

// The additional doses of record r that arrive by `horizon` (the subject's last record time; a
// later one changes no output): the largest k <= r.addl with r.time + k ii <= horizon, with the
// time formed as record_events forms it.
std::int64_t addl_until(const DatasetRecord& r, double horizon) {
  if (r.addl <= 0 || !(r.ii > 0.0)) return r.addl;
  const double q = std::floor((horizon - r.time) / r.ii);
  if (!(q < static_cast<double>(r.addl))) return r.addl;
  std::int64_t k = q < 0.0 ? 0 : static_cast<std::int64_t>(q);
  while (k < r.addl && r.time + static_cast<double>(k + 1) * r.ii <= horizon) ++k;
  while (k > 0 && r.time + static_cast<double>(k) * r.ii > horizon) --k;
  return k;
}

}  // namespace

// The first half of build_plan: everything but the events.
void DatasetSetup::plan_records(std::int64_t s, SubjectPlan& plan) const {
  const ModelInfo& m = *model;
  const std::vector<DatasetRecord>& recs = data->subjects[static_cast<std::size_t>(s)].records;
  plan.events.clear();
  plan.records.resize(recs.size());
  plan.rows.clear();
  plan.ll_obs.clear();
  plan.ll_dv.clear();
  plan.ll_line.clear();
  plan.row_of.assign(recs.size(), 0);
  plan.last_obs = -std::numeric_limits<double>::infinity();
  plan.dosed = 0;
  plan.observed = 0;
  plan.lag_boundaries = 0;
  plan.infusion_ids = 0;
  plan.bolus_only = false;
  plan.event_count = 0;
  std::int64_t obs = 0;
  const double horizon = recs.empty() ? 0.0 : recs.back().time;  // times never decrease
  long double events = 0.0L;  // an upper bound of the events record_events makes
  for (std::size_t j = 0; j < recs.size(); ++j) {
    const DatasetRecord& r = recs[j];
    const std::int64_t seq = static_cast<std::int64_t>(j);
    if (r.parameters.size() != column_of.size())
      throw InvalidArgument(who + ": " + data->file + ":" + std::to_string(r.line) +
                            ": the record has " + std::to_string(r.parameters.size()) +
                            " parameter values, but the dataset has " +
                            std::to_string(column_of.size()) + " parameter columns");
    if (r.cmt > n)
      throw InvalidArgument(locate(s, seq,
                                   "CMT is " + std::to_string(r.cmt) + ", but the model " + m.name +
                                       " has " + std::to_string(n) + " compartments"));
    // The row: the dataset cells of this record (a run of equal records shares one). Compared
    // with the last row's cells in place, so that a record of the same row allocates nothing.
    bool same = !plan.rows.empty();
    if (same) {
      const std::vector<std::pair<int, double>>& last = plan.rows.back().overrides;
      std::size_t k = 0;
      for (std::size_t c = 0; c < column_of.size() && same; ++c) {
        const double v = r.parameters[c];
        if (std::isnan(v)) continue;
        same = k < last.size() && last[k].first == column_of[c] && last[k].second == v;
        ++k;
      }
      same = same && k == last.size();
    }
    if (!same) {
      RowTemplate row;
      row.first_record = seq;
      for (std::size_t c = 0; c < column_of.size(); ++c) {
        const double v = r.parameters[c];
        if (std::isnan(v)) continue;
        row.overrides.emplace_back(column_of[c], v);
        row.overridden |= std::uint64_t{1} << column_of[c];
      }
      plan.rows.push_back(std::move(row));
    }
    plan.row_of[j] = static_cast<int>(plan.rows.size()) - 1;
    EventRecord& e = plan.records[j];
    e.time = r.time;
    e.amt = r.amt;
    e.rate = r.rate;
    e.ii = r.ii;
    e.addl = addl_until(r, horizon);
    events += record_event_bound(e.addl, r.rate);
    e.evid = r.evid;
    e.ss = r.ss;
    e.dose_cmt = r.cmt > 0 ? r.cmt - 1 : m.default_dose_compartment;
    e.obs_cmt = r.cmt > 0 ? r.cmt - 1 : m.default_observation_compartment;
    e.row = plan.row_of[j];
    e.dose = r.is_dose() ? 1 : 0;
    if (r.evid == 0) {
      if (!r.mdv && !std::isnan(r.dv)) {
        plan.ll_obs.push_back(static_cast<int>(obs));
        plan.ll_dv.push_back(r.dv);
        plan.ll_line.push_back(static_cast<int>(r.line));
      }
      plan.observed |= std::uint64_t{1} << e.obs_cmt;
      ++obs;
      plan.last_obs = r.time;
    } else if (r.is_dose()) {
      plan.dosed |= std::uint64_t{1} << e.dose_cmt;
    }
  }
  plan.obs_count = obs;
  if (events > static_cast<long double>(max_events)) {
    std::size_t j = 0;  // the record with the most additional doses
    for (std::size_t i = 1; i < plan.records.size(); ++i)
      if (plan.records[i].addl > plan.records[j].addl) j = i;
    fail_record(s, static_cast<std::int64_t>(j),
                "the subject's doses up to its last record make about " +
                    format_value(static_cast<double>(events)) +
                    " events, more than the memory limit holds (" + std::to_string(max_events) +
                    "); use fewer additional doses (ADDL) or a longer II");
  }
}

void DatasetSetup::build_records(std::int64_t s, SubjectPlan& plan) const {
  plan_records(s, plan);
  PlanCounts counts;
  std::int64_t events = 0;
  for (std::size_t j = 0; j < plan.records.size(); ++j)
    record_events(plan.records[j], static_cast<std::int64_t>(j), counts,
                  [&events](const EventTemplate&) { ++events; });
  plan.event_count = events;
  plan.infusion_ids = counts.next_id;
  plan.lag_boundaries = static_cast<std::size_t>(counts.lag_boundaries);
}

namespace {

// The events of plan's records, sorted, into `out` (empty), counted in `counts`.
void make_events(const SubjectPlan& plan, std::vector<EventTemplate>& out, PlanCounts& counts) {
  // Room for every event (record_events makes at most a stop per infusion dose beside the dose,
  // and a boundary or steady state per record), so that the vector grows once.
  std::size_t events = 0;
  for (const EventRecord& r : plan.records)
    events += r.dose == 0 ? 2 : 2 + static_cast<std::size_t>(r.addl + 1) * (r.rate > 0.0 ? 2 : 1);
  out.reserve(events);
  for (std::size_t j = 0; j < plan.records.size(); ++j)
    record_events(plan.records[j], static_cast<std::int64_t>(j), counts,
                  [&out](const EventTemplate& t) { out.push_back(t); });
  sort_events(out);
}

}  // namespace

void remake_events(const SubjectPlan& plan, std::vector<EventTemplate>& out) {
  out.clear();
  PlanCounts counts;
  make_events(plan, out, counts);
}

void DatasetSetup::build_plan(std::int64_t s, SubjectPlan& plan,
                              std::vector<EventTemplate>* scratch) const {
  plan_records(s, plan);
  std::vector<EventTemplate>& ev = scratch != nullptr ? *scratch : plan.events;
  ev.clear();
  PlanCounts counts;
  make_events(plan, ev, counts);
  plan.bolus_only = plan.records.size() <= static_cast<std::size_t>(INT32_MAX) &&
                    std::all_of(ev.begin(), ev.end(), [](const EventTemplate& t) {
                      return (t.e.kind == kDose && !(t.e.rate > 0.0)) || t.e.kind == kObserve ||
                             t.e.kind == kBoundary;
                    });
  plan.event_count = static_cast<std::int64_t>(ev.size());
  plan.infusion_ids = counts.next_id;
  plan.lag_boundaries = static_cast<std::size_t>(counts.lag_boundaries);
  plan.bolus.clear();
  if (plan.bolus_only) {
    plan.bolus.reserve(ev.size());
    std::size_t governing = 0;
    for (const EventTemplate& t : ev) {
      const EventRecord& r = plan.records[static_cast<std::size_t>(t.e.seq)];
      BolusStep b;
      b.time = t.e.time;
      b.amt = r.amt;
      b.seq = static_cast<std::int32_t>(t.e.seq);
      b.row = static_cast<std::int32_t>(t.e.row);
      b.cmt = static_cast<std::int16_t>(t.e.kind == kObserve ? r.obs_cmt : t.e.cmt);
      b.kind = static_cast<std::int16_t>(t.e.kind);
      while (governing + 1 < plan.records.size() && plan.records[governing].time < b.time)
        ++governing;
      b.governing = static_cast<std::int32_t>(governing);
      plan.bolus.push_back(b);
    }
  }
  if (scratch != nullptr && !plan.bolus_only) plan.events.swap(*scratch);
}

}  // namespace pkscan::detail
