// Design simulations (design.hpp): a dataset's records with parameters drawn per replicate.
//
// The drawn parameters reach the event solver as dataset parameter columns: a private copy of
// the dataset gains one column per parameter the population varies, and each replicate writes
// every record's values into it before simulate_dataset_into() runs the copy. A subject whose
// records all carry the same values gets one parameter row (the event plan merges equal
// consecutive records), so constant covariates cost what a dataset run costs.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <pkscan/design.hpp>
#include <pkscan/error.hpp>
#include <pkscan/threads.hpp>
#include <pkscan/vpc.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/parallel.hpp"
#include "events/plan.hpp"
#include "events/solver.hpp"
#include "population/residual.hpp"

namespace pkscan {

namespace {

constexpr const char* kWho = "run_design";
// Records of a replicate per thread woken (each record costs about 0.1 us to 1 us to prepare
// and solve: a thread is worth waking for a few hundred microseconds of work).
constexpr double kRecordsPerThread = 1000.0;
// Largest memory of the event plans a design keeps across its replicates (Plans).
constexpr double kPlanCacheBytes = 256.0 * 1024 * 1024;
// Most virtual subjects of a resampled design (DesignRun::count).
constexpr std::int64_t kMaxCount = 1'000'000'000;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

// A dataset cell read as a number: finite, else a ConfigError at its file, line and column.
double cell_number(const Dataset& d, const DatasetRecord& r, int slot, const std::string& what,
                   const std::string& rule) {
  const std::string& text = r.covariates[static_cast<std::size_t>(slot)];
  const std::string& name = d.covariate_columns[static_cast<std::size_t>(slot)];
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    throw ConfigError(d.file, static_cast<int>(r.line), d.header_column(name),
                      what + " column " + name + " is \"" + text + "\", but must be " + rule);
  return v;
}

// Everything a design run prepares once: the sampler, the dataset copy with the drawn columns,
// every record's covariate values and occasion, the parameter table's rows and the observation
// rows of each subject.
struct Design {
  std::shared_ptr<const ModelInfo> model;
  std::unique_ptr<PopulationSampler> sampler;
  const Dataset* src = nullptr;        // the design's dataset (DesignRun::data)
  Dataset data;                        // the copy with the drawn columns (make_copy)
  std::vector<int> drawn;              // model columns drawn per record
  std::vector<int> drawn_slot;         // their slots in data.parameter_columns
  std::vector<int> column_of;          // per parameter column of src: its model column
  std::int64_t max_records = 0;        // the most records of a subject
  std::vector<std::int64_t> record0;   // per subject: its first record's index in the flat arrays
  std::vector<double> cov;             // per record x covariate_names
  std::vector<std::int64_t> occasion;  // per record (with iov)
  std::vector<double> lloq;            // per observation row (an LLOQ column)
  std::vector<std::int64_t> obs0;      // per subject: its first observation row (and the total)
  std::vector<std::int64_t> table0;    // per subject: its first table row (and the total)
  std::vector<std::int64_t> table_record;  // per table row: its first record (within the subject)
  std::vector<std::int64_t> table_subject;
  std::vector<double> table_occasion;
  bool iov = false;
};

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
    occ_slot = src.covariate_index(run.occasion);
    if (occ_slot < 0)
      throw InvalidArgument(std::string(kWho) + ": the occasion column " + run.occasion +
                                " is not a column of the dataset " + src.file +
                                " (its covariate columns: " + join(src.covariate_columns) + ")",
                            "occasion", run.occasion, "");
  } else if (!run.occasion.empty()) {
    throw InvalidArgument(std::string(kWho) + ": an occasion column (" + run.occasion +
                              ") is given without between-occasion variability (iov)",
                          "occasion", run.occasion, "");
  }
  int lloq_slot = -1;
  if (!run.lloq_column.empty()) {
    lloq_slot = src.covariate_index(run.lloq_column);
    if (lloq_slot < 0)
      throw InvalidArgument(std::string(kWho) + ": the LLOQ column " + run.lloq_column +
                                " is not a column of the dataset " + src.file +
                                " (its covariate columns: " + join(src.covariate_columns) + ")",
                            "lloq_column", run.lloq_column, "");
  }

  d.record0.resize(static_cast<std::size_t>(n) + 1);
  d.obs0.resize(static_cast<std::size_t>(n) + 1);
  d.table0.resize(static_cast<std::size_t>(n) + 1);
  std::int64_t records = 0;
  std::int64_t obs = 0;
  for (std::int64_t s = 0; s < n; ++s) {
    d.record0[static_cast<std::size_t>(s)] = records;
    d.obs0[static_cast<std::size_t>(s)] = obs;
    for (const DatasetRecord& r : src.subjects[static_cast<std::size_t>(s)].records) {
      ++records;
      obs += r.evid == 0;
    }
  }
  d.record0.back() = records;
  d.obs0.back() = obs;
  d.cov.resize(static_cast<std::size_t>(records) * ncov);
  if (d.iov) d.occasion.resize(static_cast<std::size_t>(records));
  if (lloq_slot >= 0) d.lloq.resize(static_cast<std::size_t>(obs));
  PopulationSpec spec = pop;
  spec.count = n;
  spec.covariates.assign(static_cast<std::size_t>(n) * ncov, 0.0);
  std::int64_t row = 0;
  std::int64_t table = 0;
  for (std::int64_t s = 0; s < n; ++s) {
    const DatasetSubject& subj = src.subjects[static_cast<std::size_t>(s)];
    d.table0[static_cast<std::size_t>(s)] = table;
    std::vector<std::int64_t> seen;  // this subject's occasions
    for (std::size_t j = 0; j < subj.records.size(); ++j) {
      const DatasetRecord& r = subj.records[j];
      const std::int64_t at = d.record0[static_cast<std::size_t>(s)] + static_cast<std::int64_t>(j);
      for (std::size_t k = 0; k < ncov; ++k) {
        const double v = cell_number(src, r, slot[k], "covariate",
                                     power[k] ? "a number > 0 (a power effect uses it)"
                                              : "a finite number (a covariate effect uses it)");
        if (power[k] && !(v > 0.0))
          throw ConfigError(
              src.file, static_cast<int>(r.line),
              src.header_column(src.covariate_columns[static_cast<std::size_t>(slot[k])]),
              "covariate column " + pop.covariate_names[k] + " is \"" +
                  r.covariates[static_cast<std::size_t>(slot[k])] +
                  "\", but must be a number > 0 (a power effect uses it)");
        d.cov[static_cast<std::size_t>(at) * ncov + k] = v;
        if (j == 0) spec.covariates[static_cast<std::size_t>(s) * ncov + k] = v;
      }
      if (d.iov) {
        const double v =
            cell_number(src, r, occ_slot, "occasion", "a whole number (the occasion's number)");
        if (v != std::floor(v) || std::fabs(v) > 9007199254740992.0)
          throw ConfigError(
              src.file, static_cast<int>(r.line),
              src.header_column(src.covariate_columns[static_cast<std::size_t>(occ_slot)]),
              "occasion column " + run.occasion + " is \"" +
                  r.covariates[static_cast<std::size_t>(occ_slot)] +
                  "\", but must be a whole number (the occasion's number)");
        const auto o = static_cast<std::int64_t>(v);
        d.occasion[static_cast<std::size_t>(at)] = o;
        if (std::find(seen.begin(), seen.end(), o) == seen.end()) {
          seen.push_back(o);
          d.table_record.push_back(static_cast<std::int64_t>(j));
          d.table_subject.push_back(s);
          d.table_occasion.push_back(v);
          ++table;
        }
      } else if (j == 0) {
        d.table_record.push_back(0);
        d.table_subject.push_back(s);
        ++table;
      }
      if (r.evid == 0) {
        if (lloq_slot >= 0) {
          const double v =
              cell_number(src, r, lloq_slot, "LLOQ", "a finite number >= 0 (the record's LLOQ)");
          if (!(v >= 0.0))
            throw ConfigError(
                src.file, static_cast<int>(r.line),
                src.header_column(src.covariate_columns[static_cast<std::size_t>(lloq_slot)]),
                "LLOQ column " + run.lloq_column + " is \"" +
                    r.covariates[static_cast<std::size_t>(lloq_slot)] +
                    "\", but must be a finite number >= 0 (the record's LLOQ)");
          d.lloq[static_cast<std::size_t>(row)] = v;
        }
        ++row;
      }
    }
  }
  d.table0.back() = table;
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
void drawn_values(const Design& d, std::int64_t s, std::int64_t draw, std::int64_t replicate,
                  const double* eta, std::vector<double>& kappa, std::vector<double>& row,
                  std::vector<double>& out) {
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
    if (!same) smp.individual(eta, d.iov ? kappa.data() : nullptr, cov, row.data());
    for (std::size_t k = 0; k < nd; ++k)
      out[j * nd + k] = row[static_cast<std::size_t>(d.drawn[k])];
  }
}

// Writes drawn_values() `vals` of a subject into its records in the copy.
void write_values(const Design& d, const std::vector<double>& vals, DatasetSubject& subj) {
  const std::size_t nd = d.drawn.size();
  for (std::size_t j = 0; j < subj.records.size(); ++j)
    for (std::size_t k = 0; k < nd; ++k)
      subj.records[j].parameters[static_cast<std::size_t>(d.drawn_slot[k])] = vals[j * nd + k];
}

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

// The parameter rows of dataset subject s's plan (a plan of the dataset without the drawn
// columns) for its drawn values `vals`: each record's dataset cells, then its drawn values, a
// run of records with equal cells sharing one row, as DatasetSetup::plan_records makes them from
// the copy with the values written in. Reuses the plan's rows (no allocation once warm).
void set_rows(const Design& d, std::int64_t s, const double* vals, detail::SubjectPlan& plan) {
  const std::vector<DatasetRecord>& recs = d.src->subjects[static_cast<std::size_t>(s)].records;
  const std::size_t nd = d.drawn.size();
  const std::size_t ncol = d.column_of.size();
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

}  // namespace

std::int64_t design_rows(const DesignRun& run) noexcept {
  if (!run.data) return 0;
  if (run.count <= 0 || run.data->subjects.empty()) return run.data->observation_count();
  const long double mean = static_cast<long double>(run.data->observation_count()) /
                           static_cast<long double>(run.data->subjects.size());
  return static_cast<std::int64_t>(std::llround(mean * static_cast<long double>(run.count)));
}

DesignLayout design_layout(const DesignRun& run) {
  DesignLayout l;
  l.model = run.population.model;
  l.data = run.data;
  l.replicates = run.replicates;
  l.observations = run.residual.has_value();
  l.blq = run.residual.has_value() && (!std::isnan(run.lloq) || !run.lloq_column.empty());
  if (run.parameter_table && l.model) {
    for (std::size_t c = 0; c < l.model->parameters.size(); ++c)
      if (!std::isnan(run.population.typical[c])) l.parameter_table.push_back(static_cast<int>(c));
    for (int c : run.population.iiv)
      l.eta_columns.push_back("eta_" + l.model->parameters[static_cast<std::size_t>(c)].name);
    for (int c : run.population.iov)
      l.iov_columns.push_back("iov_" + l.model->parameters[static_cast<std::size_t>(c)].name);
    l.occasions = !run.population.iov.empty();
  }
  l.resampled = run.count > 0;
  return l;
}

namespace {

// The event plans of a design's dataset subjects, kept across replicates (their events do not
// depend on the parameters; set_rows writes each replicate's rows), or none where they would
// take more than kPlanCacheBytes (each replicate then plans its subjects again).
struct Plans {
  std::vector<detail::SubjectPlan> plan;  // per dataset subject, or empty
};

// Bytes the plans of d's subjects take at most (DatasetSetup::plan_records's bound of events).
double plan_bytes(const Design& d) {
  long double bytes = 0.0L;
  for (const DatasetSubject& subj : d.src->subjects) {
    bytes += sizeof(detail::SubjectPlan);
    for (const DatasetRecord& r : subj.records)
      bytes += sizeof(detail::EventRecord) + sizeof(int) + sizeof(detail::RowTemplate) +
               (3.0L + static_cast<long double>(std::max<std::int64_t>(0, r.addl) + 1) *
                           (r.rate > 0.0 ? 2.0L : 1.0L)) *
                   sizeof(detail::EventTemplate);
  }
  return static_cast<double>(bytes);
}

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
  const bool keep = plans != nullptr && plan_bytes(d) <= kPlanCacheBytes;
  if (keep) plans->plan.resize(static_cast<std::size_t>(n));
  const ParameterBatch typical = typical_batch(d, 1);
  struct Scratch {
    std::vector<double> eta, kappa, row, vals, rows;
    detail::SubjectPlan plan;
  };
  detail::parallel_for(
      n, n > 1000 ? resolve_threads(run.options.threads) : 1, 256,
      [&] {
        return Scratch{std::vector<double>(static_cast<std::size_t>(d.sampler->etas()) + 1, 0.0),
                       std::vector<double>(static_cast<std::size_t>(d.sampler->kappas()) + 1, 0.0),
                       std::vector<double>(static_cast<std::size_t>(d.sampler->parameters())),
                       {},
                       {},
                       {}};
      },
      [&](std::int64_t s, Scratch& w) {
        detail::SubjectPlan& plan = keep ? plans->plan[static_cast<std::size_t>(s)] : w.plan;
        setup->build_plan(s, plan);
        drawn_values(d, s, s, -1, w.eta.data(), w.kappa, w.row, w.vals);
        set_rows(d, s, w.vals.data(), plan);
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

}  // namespace

void check_design_run(const DesignRun& run) {
  Design d = prepare(run);
  const detail::DatasetSetup setup = design_setup(d, run.options);
  check_prepared(d, run, &setup, nullptr);
}

std::vector<double> design_population_predictions(const DesignRun& run) {
  Design d = prepare(run);
  check_prepared(d, run, nullptr, nullptr);  // fills the copy at eta = 0 and kappa = 0
  DatasetResult result;
  simulate_dataset_into(d.data, typical_batch(d, static_cast<std::int64_t>(d.data.subjects.size())),
                        run.options, result);
  return std::move(result.prediction);
}

RunSummary run_design(const DesignRun& run, DesignSink& sink, const DesignProgressFn& progress) {
  const auto t_start = std::chrono::steady_clock::now();
  Design d = prepare(run);
  const bool on_device = run.options.device == Device::Cuda;
  // On the CPU, the solver runs the dataset itself: each subject's plan (kept across
  // replicates where it fits) gets the drawn values as its rows. The device runs the copy with
  // the drawn values written in.
  const detail::DatasetSetup setup = design_setup(d, run.options);
  Plans plans;
  check_prepared(d, run, on_device ? nullptr : &setup, &plans);
  const DesignLayout layout = design_layout(run);
  const PopulationSampler& smp = *d.sampler;
  const std::int64_t n = static_cast<std::int64_t>(d.src->subjects.size());
  const bool resampled = run.count > 0;
  const std::int64_t subjects = resampled ? run.count : n;  // per replicate
  const int m = smp.etas();
  const int np = smp.parameters();
  const int nk = smp.kappas();
  // A replicate's parallel regions wake only the threads its work needs: a small design runs on
  // one thread (waking a pool for a few microseconds of work, many times per replicate, costs
  // more than it saves, and much more on a busy machine).
  const double records = static_cast<double>(d.record0.back()) * static_cast<double>(subjects) /
                         static_cast<double>(n);
  const int threads =
      detail::threads_for_work(resolve_threads(run.options.threads), records, kRecordsPerThread);
  SimulateOptions sim_options = run.options;
  sim_options.threads = threads;
  const ParameterBatch batch = typical_batch(d, 1);  // every subject's row: the typical values
  const double* typical = batch.row(0);
  std::vector<double> base(static_cast<std::size_t>(subjects * np));
  std::vector<double> etas(static_cast<std::size_t>(subjects * m));
  // The device's dataset: the copy, or with count the virtual subjects (each replicate copies
  // its sources' records in).
  Dataset virtual_data;
  if (resampled && on_device) {
    virtual_data.file = d.data.file;
    virtual_data.columns = d.data.columns;
    virtual_data.parameter_columns = d.data.parameter_columns;
    virtual_data.covariate_columns = d.data.covariate_columns;
    virtual_data.subjects.resize(static_cast<std::size_t>(subjects));
  }
  Dataset& sim = resampled ? virtual_data : d.data;
  // Per subject of a replicate: its source, its first observation row and first table row.
  std::vector<std::int64_t> source(static_cast<std::size_t>(subjects));
  std::vector<std::int64_t> obs0 = d.obs0, table0 = d.table0;
  std::vector<std::int64_t> table_subject = d.table_subject;
  std::vector<double> table_occasion = d.table_occasion;
  for (std::int64_t s = 0; s < subjects; ++s) source[static_cast<std::size_t>(s)] = s;
  std::vector<double> dv;
  std::vector<std::int8_t> blq;
  std::vector<double> tparams, tetas, tkappas;
  const std::size_t nd = d.drawn.size();
  DatasetResult result;
  RunSummary total;
  const Method method = run.options.method == Method::Auto ? Method::Batched : run.options.method;
  const int solver_threads =
      method == Method::Scan
          ? 1
          : static_cast<int>(std::min<std::int64_t>(threads, std::max<std::int64_t>(1, subjects)));
  // Per subject, on one thread: its records' parameters, its table rows, and on the CPU its
  // events solved and its residual errors drawn. One per thread, kept across replicates.
  struct Worker {
    std::vector<double> kappa, row, z, vals;
    detail::SubjectPlan plan;
    std::unique_ptr<detail::EventSolver> solver;
  };
  std::vector<Worker> workers(static_cast<std::size_t>(std::max(threads, solver_threads)));
  for (Worker& w : workers) {
    w.kappa.resize(static_cast<std::size_t>(nk) + 1);
    w.row.resize(static_cast<std::size_t>(np));
  }
  total.prepare_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  for (std::int64_t rep = 0; rep < run.replicates; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    smp.sample(rep, 0, subjects, base.data(), etas.data(), threads);
    if (resampled) {
      obs0.assign(1, 0);
      table0.assign(1, 0);
      table_subject.clear();
      table_occasion.clear();
      for (std::int64_t j = 0; j < subjects; ++j) {
        const std::int64_t src = resampled_subject(smp.spec().seed, rep, j, n);
        const std::size_t us = static_cast<std::size_t>(src);
        source[static_cast<std::size_t>(j)] = src;
        obs0.push_back(obs0.back() + d.obs0[us + 1] - d.obs0[us]);
        table0.push_back(table0.back() + d.table0[us + 1] - d.table0[us]);
        for (std::int64_t t = d.table0[us]; t < d.table0[us + 1]; ++t) {
          table_subject.push_back(j);
          if (d.iov) table_occasion.push_back(d.table_occasion[static_cast<std::size_t>(t)]);
        }
      }
    }
    const std::int64_t obs = obs0.back();
    const std::int64_t trows = table0.back();
    if (layout.observations) dv.resize(static_cast<std::size_t>(obs));
    if (layout.blq) blq.resize(static_cast<std::size_t>(obs));
    if (run.parameter_table) {
      tparams.resize(static_cast<std::size_t>(trows * np));
      tetas.resize(static_cast<std::size_t>(trows * m));
      tkappas.resize(static_cast<std::size_t>(trows * nk));
    }
    if (!on_device) {
      // The rows of every subject (simulate_dataset_into's), filled by the subjects themselves.
      const std::size_t rows = static_cast<std::size_t>(obs);
      const std::size_t nc = d.model->compartments.size();
      result.compartments = static_cast<int>(nc);
      result.subject.resize(rows);
      result.record.resize(rows);
      result.time.resize(rows);
      result.compartment.resize(rows);
      result.amounts.resize(rows * nc);
      result.concentrations.resize(rows * nc);
      result.prediction.resize(rows);
      result.status.assign(static_cast<std::size_t>(subjects), SubjectStatus::Ok);
    }
    const auto residuals = [&](std::int64_t s, std::vector<double>& z) {
      const ResidualError& e = *run.residual;
      const std::size_t us = static_cast<std::size_t>(s);
      const std::int64_t a = obs0[us];
      const std::int64_t k = obs0[us + 1] - a;
      const std::int64_t a_src = d.obs0[static_cast<std::size_t>(source[us])];
      z.resize(static_cast<std::size_t>(2 * k));
      residual_normals(smp.spec().seed, rep, s, 2 * k, z.data());
      for (std::int64_t i = 0; i < k; ++i) {
        const std::size_t at = static_cast<std::size_t>(a + i);
        const double y =
            detail::observation(e, result.prediction[at], z[static_cast<std::size_t>(2 * i)],
                                z[static_cast<std::size_t>(2 * i + 1)]);
        dv[at] = y;
        if (layout.blq)
          blq[at] =
              y < (d.lloq.empty() ? run.lloq : d.lloq[static_cast<std::size_t>(a_src + i)]) ? 1 : 0;
      }
    };
    const auto subject = [&](std::int64_t s, Worker* wp) {
      Worker& w = *wp;
      const std::size_t us = static_cast<std::size_t>(s);
      const std::int64_t src = source[us];
      const std::size_t usrc = static_cast<std::size_t>(src);
      const double* eta = etas.data() + s * m;
      drawn_values(d, src, s, rep, eta, w.kappa, w.row, w.vals);
      if (run.parameter_table) {
        for (std::int64_t t = d.table0[usrc]; t < d.table0[usrc + 1]; ++t) {
          const std::size_t ut = static_cast<std::size_t>(t);
          const std::int64_t to = table0[us] + (t - d.table0[usrc]);  // the replicate's row
          const std::size_t rec = static_cast<std::size_t>(d.table_record[ut]);
          const DatasetRecord& r = d.src->subjects[usrc].records[rec];
          // The record's full row: the typical values, its dataset cells, then the drawn ones.
          double* out = tparams.data() + to * np;
          std::copy(typical, typical + np, out);
          for (std::size_t c = 0; c < d.column_of.size(); ++c)
            if (d.column_of[c] >= 0 && !std::isnan(r.parameters[c]))
              out[d.column_of[c]] = r.parameters[c];
          for (std::size_t k = 0; k < nd; ++k)
            if (!std::isnan(w.vals[rec * nd + k])) out[d.drawn[k]] = w.vals[rec * nd + k];
          std::copy(eta, eta + m, tetas.data() + to * m);
          if (d.iov)
            smp.occasion(rep, s, static_cast<std::int64_t>(d.table_occasion[ut]),
                         tkappas.data() + to * nk);
        }
      }
      if (on_device) {
        DatasetSubject& subj = sim.subjects[us];
        if (resampled) {
          subj.id = d.data.subjects[usrc].id;
          subj.records = d.data.subjects[usrc].records;
        }
        write_values(d, w.vals, subj);
        return;
      }
      // The source's plan, its rows this subject's: in place, or a copy where the source may
      // be simulated by another thread at once (resampled).
      detail::SubjectPlan* plan = &w.plan;
      if (plans.plan.empty())
        setup.build_plan(src, w.plan);
      else if (resampled)
        w.plan = plans.plan[usrc];
      else
        plan = &plans.plan[usrc];
      set_rows(d, src, w.vals.data(), *plan);
      const bool finite = w.solver->simulate_rows(*plan, src, typical, result, obs0[us]);
      if (src != s) std::fill_n(result.subject.begin() + obs0[us], obs0[us + 1] - obs0[us], s);
      result.status[us] = finite ? SubjectStatus::Ok : SubjectStatus::NonFinite;
      if (run.residual) residuals(s, w.z);
    };
    try {
      detail::parallel_for(
          subjects, on_device ? threads : solver_threads, 16,
          [&] {
            Worker& w = workers[static_cast<std::size_t>(detail::thread_index())];
            if (!on_device && !w.solver) w.solver = detail::make_event_solver(setup);
            return &w;
          },
          subject);
      if (on_device) simulate_dataset_into(sim, typical_batch(d, subjects), sim_options, result);
    } catch (const DomainError& e) {
      throw DomainError(std::string(e.what()) + " (replicate " + std::to_string(rep + 1) + ")",
                        e.field(), e.value(), e.rule());
    }
    if (on_device) {
      if (run.residual)
        detail::parallel_for(
            subjects, threads, 64, [] { return std::vector<double>(); }, residuals);
      total.prepare_seconds += result.summary.prepare_seconds;
      total.scan_seconds += result.summary.scan_seconds;
      total.threads = result.summary.threads;
    } else {
      total.scan_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      total.threads = solver_threads;
      result.summary = RunSummary{};
      result.summary.method = method;
      result.summary.device = Device::Cpu;
      result.summary.threads = solver_threads;
      for (SubjectStatus st : result.status)
        result.summary.non_finite_subjects += st != SubjectStatus::Ok;
    }
    total.method = result.summary.method;
    total.device = on_device ? Device::Cuda : Device::Cpu;
    total.non_finite_subjects += result.summary.non_finite_subjects;
    DesignChunk c;
    c.replicate = rep;
    c.result = &result;
    if (layout.observations) c.dv = dv.data();
    if (layout.blq) c.blq = blq.data();
    if (resampled) c.source = source.data();
    if (run.parameter_table) {
      c.table_rows = trows;
      c.table_subject = table_subject.data();
      c.table_occasion = d.iov ? table_occasion.data() : nullptr;
      c.table_parameters = tparams.data();
      c.table_etas = tetas.data();
      c.table_kappas = tkappas.data();
    }
    sink.write(c);
    if (progress) progress(rep + 1, run.replicates);
  }
  sink.commit();
  return total;
}

}  // namespace pkscan
