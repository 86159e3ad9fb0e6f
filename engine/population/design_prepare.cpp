// The parts of a design simulation (design_parts.hpp).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <pkscan/error.hpp>
#include <pkscan/threads.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/parallel.hpp"
#include "population/design_parts.hpp"
#include "population/residual.hpp"

namespace pkscan::detail {

namespace {

constexpr const char* kWho = "run_design";
// Largest memory of the event plans a design keeps across its replicates (Plans).
constexpr double kPlanCacheBytes = 256.0 * 1024 * 1024;
// Most virtual subjects of a resampled design (DesignRun::count).
constexpr std::int64_t kMaxCount = 1'000'000'000;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

// The slot of the dataset's covariate column `name` (the `what` column, DesignRun field `field`).
// @throws InvalidArgument when the dataset has no such column
int column_slot(const Dataset& src, const std::string& name, const std::string& what,
                const char* field) {
  const int slot = src.covariate_index(name);
  if (slot < 0)
    throw InvalidArgument(std::string(kWho) + ": the " + what + " column " + name +
                              " is not a column of the dataset " + src.file +
                              " (its covariate columns: " + join(src.covariate_columns) + ")",
                          field, name, "");
  return slot;
}

// The ConfigError of record r's cell in covariate slot `slot` (the `what` column `name`), at its
// file, line and column: "WHAT column NAME is "TEXT", but must be RULE".
[[noreturn]] void bad_cell(const Dataset& d, const DatasetRecord& r, int slot,
                           const std::string& what, const std::string& name,
                           const std::string& rule) {
  const std::size_t at = static_cast<std::size_t>(slot);
  throw ConfigError(
      d.file, static_cast<int>(r.line), d.header_column(d.covariate_columns[at]),
      what + " column " + name + " is \"" + r.covariates[at] + "\", but must be " + rule);
}

// A dataset cell read as a number: finite, else a ConfigError at its file, line and column.
double cell_number(const Dataset& d, const DatasetRecord& r, int slot, const std::string& what,
                   const std::string& rule) {
  const std::string& text = r.covariates[static_cast<std::size_t>(slot)];
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    bad_cell(d, r, slot, what, d.covariate_columns[static_cast<std::size_t>(slot)], rule);
  return v;
}

}  // namespace

Design prepare(const DesignRun& run) {
  if (!run.data) throw InvalidArgument(std::string(kWho) + ": no dataset", "data", "null", "");
  if (!run.population.model)
    throw InvalidArgument(std::string(kWho) + ": the population has no model", "population.model",
                          "null", "");
  if (run.replicates < 1)
    throw DomainError(std::string(kWho) + ": replicates is " + std::to_string(run.replicates) +
                          ", but must be >= 1",
                      "replicates", std::to_string(run.replicates), ">= 1");
  if (run.count < 0 || run.count > kMaxCount)
    throw DomainError(std::string(kWho) + ": count is " + std::to_string(run.count) +
                          ", but must be in [1, " + std::to_string(kMaxCount) +
                          "] (0: every dataset subject once)",
                      "count", std::to_string(run.count), "in [1, 1e9]");
  if (run.residual) detail::check_residual(kWho, *run.residual);
  const bool has_lloq = !std::isnan(run.lloq) || !run.lloq_column.empty();
  if (has_lloq && !run.residual)
    throw InvalidArgument(
        std::string(kWho) + ": lloq needs a residual error (BLQ flags the simulated observations)",
        run.lloq_column.empty() ? "lloq" : "lloq_column", "", "");
  if (!std::isnan(run.lloq)) detail::check_lloq(kWho, run.lloq);
  if (!std::isnan(run.lloq) && !run.lloq_column.empty())
    throw InvalidArgument(std::string(kWho) + ": give lloq or lloq_column, not both", "lloq", "",
                          "");
  const Dataset& src = *run.data;
  const PopulationSpec& pop = run.population;
  Design d;
  d.model = pop.model;
  const ModelInfo& model = *pop.model;
  const std::int64_t n = static_cast<std::int64_t>(src.subjects.size());

  // Covariates: dataset columns, read as numbers on every record.
  std::vector<int> slot(pop.covariate_names.size());
  std::vector<char> power(pop.covariate_names.size(), 0);
  for (const CovariateEffect& e : pop.effects)
    if (e.covariate >= 0 && static_cast<std::size_t>(e.covariate) < power.size() &&
        e.model == CovariateModel::Power)
      power[static_cast<std::size_t>(e.covariate)] = 1;
  for (std::size_t k = 0; k < slot.size(); ++k) {
    slot[k] = src.covariate_index(pop.covariate_names[k]);
    if (slot[k] < 0) {
      // The field of the first effect that uses it (the loader reports it there).
      std::string field = "covariate_names[" + std::to_string(k) + "]";
      for (std::size_t e = 0; e < pop.effects.size(); ++e)
        if (pop.effects[e].covariate == static_cast<int>(k)) {
          field = "effects[" + std::to_string(e) + "].covariate";
          break;
        }
      throw InvalidArgument(std::string(kWho) + ": the covariate " + pop.covariate_names[k] +
                                " is not a column of the dataset " + src.file +
                                " (its covariate columns: " + join(src.covariate_columns) + ")",
                            field, pop.covariate_names[k], "");
    }
  }
  const std::size_t ncov = slot.size();
  int occ_slot = -1;
  d.iov = !pop.iov.empty();
  if (d.iov) {
    if (run.occasion.empty())
      throw InvalidArgument(std::string(kWho) +
                                ": between-occasion variability needs the dataset's occasion "
                                "column",
                            "occasion", "", "");
    occ_slot = column_slot(src, run.occasion, "occasion", "occasion");
  } else if (!run.occasion.empty()) {
    throw InvalidArgument(std::string(kWho) + ": an occasion column (" + run.occasion +
                              ") is given without between-occasion variability (iov)",
                          "occasion", run.occasion, "");
  }
  int lloq_slot = -1;
  if (!run.lloq_column.empty()) {
    lloq_slot = column_slot(src, run.lloq_column, "LLOQ", "lloq_column");
  }

  d.record0.resize(static_cast<std::size_t>(n) + 1);
  d.obs0.resize(static_cast<std::size_t>(n) + 1);
  d.table0.resize(static_cast<std::size_t>(n) + 1);
  std::int64_t records = 0;
  for (std::int64_t s = 0; s < n; ++s) {
    d.record0[static_cast<std::size_t>(s)] = records;
    records += static_cast<std::int64_t>(src.subjects[static_cast<std::size_t>(s)].records.size());
  }
  d.record0.back() = records;
  d.cov.resize(static_cast<std::size_t>(records) * ncov);
  if (d.iov) d.occasion.resize(static_cast<std::size_t>(records));
  PopulationSpec spec = pop;
  spec.count = n;
  spec.covariates.assign(static_cast<std::size_t>(n) * ncov, 0.0);
  // Every record read once, the subjects in parallel (an error is the first subject's, at its
  // first bad record, as in file order): its covariates and occasion, whether it is an
  // observation and starts a parameter-table row, its LLOQ; each subject's plan bytes. Then the
  // subjects' offsets in order.
  constexpr char kObservation = 1, kTableRow = 2;
  std::vector<char> flags(static_cast<std::size_t>(records), 0);
  std::vector<double> record_lloq(lloq_slot >= 0 ? static_cast<std::size_t>(records) : 0);
  std::vector<long double> subject_bytes(static_cast<std::size_t>(n), 0.0L);
  detail::parallel_for(
      n,
      threads_for_work(resolve_threads(run.options.threads), static_cast<double>(records),
                       kRecordsPerThread),
      16, [] { return std::vector<std::int64_t>(); },
      [&](std::int64_t s, std::vector<std::int64_t>& seen) {  // seen: the subject's occasions
        const DatasetSubject& subj = src.subjects[static_cast<std::size_t>(s)];
        long double bytes = sizeof(detail::SubjectPlan);
        seen.clear();
        for (std::size_t j = 0; j < subj.records.size(); ++j) {
          const DatasetRecord& r = subj.records[j];
          const std::size_t at =
              static_cast<std::size_t>(d.record0[static_cast<std::size_t>(s)]) + j;
          // The most its plan takes (DatasetSetup::plan_records's bound of events).
          bytes += sizeof(detail::EventRecord) + sizeof(int) + sizeof(detail::RowTemplate) +
                   record_event_bound(std::max<std::int64_t>(0, r.addl), r.rate) *
                       sizeof(detail::EventTemplate);
          for (std::size_t k = 0; k < ncov; ++k) {
            const double v = cell_number(src, r, slot[k], "covariate",
                                         power[k] ? "a number > 0 (a power effect uses it)"
                                                  : "a finite number (a covariate effect uses it)");
            if (power[k] && !(v > 0.0))
              bad_cell(src, r, slot[k], "covariate", pop.covariate_names[k],
                       "a number > 0 (a power effect uses it)");
            d.cov[at * ncov + k] = v;
            if (j == 0) spec.covariates[static_cast<std::size_t>(s) * ncov + k] = v;
          }
          if (d.iov) {
            const double v =
                cell_number(src, r, occ_slot, "occasion", "a whole number (the occasion's number)");
            if (v != std::floor(v) || std::fabs(v) > 9007199254740992.0)
              bad_cell(src, r, occ_slot, "occasion", run.occasion,
                       "a whole number (the occasion's number)");
            const auto o = static_cast<std::int64_t>(v);
            d.occasion[at] = o;
            if (std::find(seen.begin(), seen.end(), o) == seen.end()) {
              seen.push_back(o);
              flags[at] |= kTableRow;
            }
          } else if (j == 0) {
            flags[at] |= kTableRow;
          }
          if (r.evid == 0) {
            flags[at] |= kObservation;
            if (lloq_slot >= 0) {
              const double v = cell_number(src, r, lloq_slot, "LLOQ",
                                           "a finite number >= 0 (the record's LLOQ)");
              if (!(v >= 0.0))
                bad_cell(src, r, lloq_slot, "LLOQ", run.lloq_column,
                         "a finite number >= 0 (the record's LLOQ)");
              record_lloq[at] = v;
            }
          }
        }
        subject_bytes[static_cast<std::size_t>(s)] = bytes;
      });
  std::int64_t row = 0;
  std::int64_t table = 0;
  long double plan_bytes = 0.0L;
  for (std::int64_t s = 0; s < n; ++s) {
    d.table0[static_cast<std::size_t>(s)] = table;
    d.obs0[static_cast<std::size_t>(s)] = row;
    plan_bytes += subject_bytes[static_cast<std::size_t>(s)];
    const std::int64_t first = d.record0[static_cast<std::size_t>(s)];
    for (std::int64_t at = first; at < d.record0[static_cast<std::size_t>(s) + 1]; ++at) {
      const char f = flags[static_cast<std::size_t>(at)];
      if (f & kTableRow) {
        d.table_record.push_back(at - first);
        d.table_subject.push_back(s);
        if (d.iov)
          d.table_occasion.push_back(static_cast<double>(d.occasion[static_cast<std::size_t>(at)]));
        ++table;
      }
      if (f & kObservation) {
        if (lloq_slot >= 0) d.lloq.push_back(record_lloq[static_cast<std::size_t>(at)]);
        ++row;
      }
    }
  }
  d.table0.back() = table;
  d.obs0.back() = row;
  d.plan_bytes = static_cast<double>(plan_bytes);
  if (run.count > 0) {
    // The virtual subjects' draws: subject j's etas are those of sampler subject j. Their rows
    // take the covariates of dataset subject j mod n (sample()'s rows are not used: each record's
    // parameters come from individual() at its own covariates).
    std::vector<double> first(spec.covariates);
    spec.count = run.count;
    spec.covariates.resize(static_cast<std::size_t>(run.count) * ncov);
    for (std::int64_t j = n; j < run.count; ++j)
      std::copy_n(
          first.begin() + static_cast<std::ptrdiff_t>((j % n) * static_cast<std::int64_t>(ncov)),
          ncov,
          spec.covariates.begin() +
              static_cast<std::ptrdiff_t>(j * static_cast<std::int64_t>(ncov)));
  }
  d.sampler = std::make_unique<PopulationSampler>(std::move(spec));

  // The columns drawn per record; none may also be a dataset column.
  std::vector<char> varies(model.parameters.size(), 0);
  for (int c : pop.iiv) varies[static_cast<std::size_t>(c)] = 1;
  for (int c : pop.iov) varies[static_cast<std::size_t>(c)] = 1;
  for (const CovariateEffect& e : pop.effects) varies[static_cast<std::size_t>(e.parameter)] = 1;
  for (const std::string& c : src.parameter_columns) {
    const int col = parameter_index(model, c);
    if (col >= 0 && varies[static_cast<std::size_t>(col)])
      throw InvalidArgument(std::string(kWho) + ": the dataset " + src.file + " has a column " + c +
                                ", but the population varies " + c +
                                " (iiv, iov or a covariate effect); rename or remove the column, "
                                "or remove the variability",
                            "data.parameter_columns", c, "");
  }
  d.src = &src;
  for (std::size_t c = 0; c < varies.size(); ++c) {
    if (!varies[c]) continue;
    d.drawn.push_back(static_cast<int>(c));
    d.drawn_slot.push_back(static_cast<int>(src.parameter_columns.size() + d.drawn_slot.size()));
  }
  for (const std::string& c : src.parameter_columns)
    d.column_of.push_back(parameter_index(model, c));
  std::int64_t most = 0;
  for (const DatasetSubject& subj : src.subjects)
    most = std::max<std::int64_t>(most, static_cast<std::int64_t>(subj.records.size()));
  d.max_records = most;
  return d;
}

// The dataset copy with a parameter column per drawn column (the device's path and the
// population predictions run it), its drawn cells 0 until fill_subject writes them.
void make_copy(Design& d) {
  d.data = *d.src;
  for (int c : d.drawn)
    d.data.parameter_columns.push_back(d.model->parameters[static_cast<std::size_t>(c)].name);
  for (DatasetSubject& subj : d.data.subjects)
    for (DatasetRecord& r : subj.records) r.parameters.resize(d.data.parameter_columns.size());
}

// Every record's drawn parameters of dataset subject s (records x d.drawn.size(), row-major)
// into `out`, from its etas (null: 0) and, with iov, the kappas of each record's occasion in
// `replicate` (replicate < 0: 0) of virtual subject `draw`.
bool drawn_values(const Design& d, std::int64_t s, std::int64_t draw, std::int64_t replicate,
                  const double* eta, std::vector<double>& kappa, std::vector<double>& row,
                  std::vector<double>& out) {
  bool uniform = true;
  const PopulationSampler& smp = *d.sampler;
  const std::size_t ncov = smp.spec().covariate_names.size();
  const std::size_t nd = d.drawn.size();
  const std::size_t records = d.src->subjects[static_cast<std::size_t>(s)].records.size();
  out.resize(records * nd);
  std::int64_t current = 0;
  bool have = false;
  for (std::size_t j = 0; j < records; ++j) {
    const std::size_t at = static_cast<std::size_t>(d.record0[static_cast<std::size_t>(s)]) + j;
    bool same = j > 0;  // the previous record's row serves: the same covariates and kappas
    if (d.iov && replicate >= 0 && (!have || d.occasion[at] != current)) {
      current = d.occasion[at];
      have = true;
      smp.occasion(replicate, draw, current, kappa.data());
      same = false;
    }
    const double* cov = d.cov.data() + at * ncov;
    if (same && ncov > 0) same = std::memcmp(cov, cov - ncov, ncov * sizeof(double)) == 0;
    if (!same) {
      smp.individual(eta, d.iov ? kappa.data() : nullptr, cov, row.data());
      uniform = uniform && j == 0;
    }
    for (std::size_t k = 0; k < nd; ++k)
      out[j * nd + k] = row[static_cast<std::size_t>(d.drawn[k])];
  }
  return uniform;
}

// Writes drawn_values() `vals` of a subject into its records in the copy.
void write_values(const Design& d, const std::vector<double>& vals, DatasetSubject& subj) {
  const std::size_t nd = d.drawn.size();
  for (std::size_t j = 0; j < subj.records.size(); ++j)
    for (std::size_t k = 0; k < nd; ++k)
      subj.records[j].parameters[static_cast<std::size_t>(d.drawn_slot[k])] = vals[j * nd + k];
}

namespace {

// Whether a[0, n) and b[0, n) are the same bits.
bool same_bits(const double* a, const double* b, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t x = 0, y = 0;
    std::memcpy(&x, a + i, sizeof x);
    std::memcpy(&y, b + i, sizeof y);
    if (x != y) return false;
  }
  return true;
}

}  // namespace

// The parameter rows of dataset subject s's plan (a plan of the dataset without the drawn
// columns) for its drawn values `vals`: each record's dataset cells, then its drawn values, a
// run of records with equal cells sharing one row, as DatasetSetup::plan_records makes them from
// the copy with the values written in. Reuses the plan's rows (no allocation once warm).
void set_rows(const Design& d, std::int64_t s, const double* vals, bool uniform,
              detail::SubjectPlan& plan) {
  const std::vector<DatasetRecord>& recs = d.src->subjects[static_cast<std::size_t>(s)].records;
  const std::size_t nd = d.drawn.size();
  const std::size_t ncol = d.column_of.size();
  // Every record's values the first's, no dataset cells: one row, and a plan of one row has
  // every record in it already (only its values change).
  if (uniform && ncol == 0 && plan.rows.size() == 1) {
    detail::RowTemplate& row = plan.rows[0];
    row.overrides.clear();
    row.overridden = 0;
    for (std::size_t c = 0; c < nd; ++c) {
      if (std::isnan(vals[c])) continue;
      row.overrides.emplace_back(d.drawn[c], vals[c]);
      row.overridden |= std::uint64_t{1} << d.drawn[c];
    }
    return;
  }
  std::size_t used = 0;
  for (std::size_t j = 0; j < plan.records.size(); ++j) {
    // The records are read only where the dataset has parameter columns.
    const double* cells = ncol > 0 ? recs[j].parameters.data() : nullptr;
    const double* v = vals + j * nd;
    // The previous record's cells and values, bit for bit: its row (a quick test first).
    if (j > 0 && same_bits(v, v - nd, nd) &&
        (ncol == 0 || same_bits(cells, recs[j - 1].parameters.data(), ncol))) {
      plan.row_of[j] = static_cast<int>(used) - 1;
      plan.records[j].row = static_cast<std::int32_t>(used) - 1;
      continue;
    }
    bool same = used > 0;
    if (same) {
      const std::vector<std::pair<int, double>>& last = plan.rows[used - 1].overrides;
      std::size_t k = 0;
      const auto match = [&](int col, double x) {
        if (std::isnan(x)) return;
        same = k < last.size() && last[k].first == col && last[k].second == x;
        ++k;
      };
      for (std::size_t c = 0; c < ncol && same; ++c) match(d.column_of[c], cells[c]);
      for (std::size_t c = 0; c < nd && same; ++c) match(d.drawn[c], v[c]);
      same = same && k == last.size();
    }
    if (!same) {
      if (used == plan.rows.size()) plan.rows.emplace_back();
      detail::RowTemplate& row = plan.rows[used++];
      row.first_record = static_cast<std::int64_t>(j);
      row.overrides.clear();
      row.overridden = 0;
      const auto add = [&row](int col, double x) {
        if (std::isnan(x)) return;
        row.overrides.emplace_back(col, x);
        row.overridden |= std::uint64_t{1} << col;
      };
      for (std::size_t c = 0; c < ncol; ++c) add(d.column_of[c], cells[c]);
      for (std::size_t c = 0; c < nd; ++c) add(d.drawn[c], v[c]);
    }
    plan.row_of[j] = static_cast<int>(used) - 1;
    plan.records[j].row = static_cast<std::int32_t>(used) - 1;
  }
  plan.rows.resize(used);
}

// A batch of every subject's typical row: the values of the columns that are not drawn.
ParameterBatch typical_batch(const Design& d, std::int64_t subjects) {
  ParameterBatch batch(d.model, subjects);
  const std::vector<double>& typ = d.sampler->spec().typical;
  double* v = batch.mutable_values();
  for (std::int64_t s = 0; s < subjects; ++s)
    std::copy(typ.begin(), typ.end(), v + s * static_cast<std::int64_t>(typ.size()));
  return batch;
}

namespace {

// Fills the copy (make_copy) with every record's parameters at eta = 0 and kappa = 0.
void fill_typical(Design& d) {
  make_copy(d);
  const std::int64_t n = static_cast<std::int64_t>(d.data.subjects.size());
  std::vector<double> eta(static_cast<std::size_t>(d.sampler->etas()) + 1, 0.0);
  std::vector<double> kappa(static_cast<std::size_t>(d.sampler->kappas()) + 1, 0.0);
  std::vector<double> row(static_cast<std::size_t>(d.sampler->parameters()));
  std::vector<double> vals;
  for (std::int64_t s = 0; s < n; ++s) {
    drawn_values(d, s, s, -1, eta.data(), kappa, row, vals);
    write_values(d, vals, d.data.subjects[static_cast<std::size_t>(s)]);
  }
}

}  // namespace

// check_design_run's checks after prepare(): every record's parameters at eta = 0 and kappa = 0,
// the typical values under the covariate effects (an effect that overflows is found here), as
// check_dataset checks a dataset. On the CPU, through `setup` (a setup of d's dataset), keeping
// the plans in `plans` where they fit.
void check_prepared(Design& d, const DesignRun& run, const detail::DatasetSetup* setup,
                    Plans* plans) {
  if (run.options.device == Device::Cuda || setup == nullptr) {
    fill_typical(d);
    check_dataset(d.data, typical_batch(d, static_cast<std::int64_t>(d.data.subjects.size())),
                  run.options);
    return;
  }
  const std::int64_t n = static_cast<std::int64_t>(d.src->subjects.size());
  const bool keep = plans != nullptr && d.plan_bytes <= kPlanCacheBytes;
  if (keep) plans->plan.resize(static_cast<std::size_t>(n));
  const ParameterBatch typical = typical_batch(d, 1);
  struct Scratch {
    std::vector<double> eta, kappa, row, vals, rows;
    detail::SubjectPlan plan;
    std::vector<detail::EventTemplate> events;  // made here: a kept bolus plan keeps none
  };
  detail::parallel_for(
      n,
      threads_for_work(resolve_threads(run.options.threads), static_cast<double>(d.record0.back()),
                       kRecordsPerThread),
      16,
      [&] {
        return Scratch{std::vector<double>(static_cast<std::size_t>(d.sampler->etas()) + 1, 0.0),
                       std::vector<double>(static_cast<std::size_t>(d.sampler->kappas()) + 1, 0.0),
                       std::vector<double>(static_cast<std::size_t>(d.sampler->parameters())),
                       {},
                       {},
                       {},
                       {}};
      },
      [&](std::int64_t s, Scratch& w) {
        detail::SubjectPlan& plan = keep ? plans->plan[static_cast<std::size_t>(s)] : w.plan;
        setup->build_plan(s, plan, &w.events);
        const bool uniform = drawn_values(d, s, s, -1, w.eta.data(), w.kappa, w.row, w.vals);
        set_rows(d, s, w.vals.data(), uniform, plan);
        setup->fill_rows(plan, s, typical.row(0), w.rows);
      });
}

// The event solver's setup of d's dataset for a run with `options`, as simulate_dataset_into
// makes it (its messages name it).
detail::DatasetSetup design_setup(const Design& d, const SimulateOptions& options) {
  detail::DatasetSetup setup(*d.src, d.model, "simulate_dataset", false);
  setup.set_memory_limit(options);
  return setup;
}

}  // namespace pkscan::detail
