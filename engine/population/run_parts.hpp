#pragma once
// What the population run's checks and layout (run_layout.cpp) and its simulation (run.cpp)
// share: the run's model and base subjects, the groups of its summaries, and an arm as a run.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <pkscan/models/model.hpp>
#include <pkscan/population_run.hpp>
#include <string>
#include <vector>

namespace pkscan::detail {

inline const std::shared_ptr<const ModelInfo>& model_of(const PopulationRun& run) noexcept {
  return run.population ? run.population->model : run.problem.parameters.info_ptr();
}

inline std::int64_t base_subjects(const PopulationRun& run) noexcept {
  return run.population ? run.population->count : run.problem.parameters.subjects();
}

// The name of sweep dimension k: the parameter's, or dose_target_name.
inline std::string sweep_name(const ModelInfo& model, const Sweep& sweep, std::size_t k) {
  const int c = sweep.columns[k];
  return c >= 0 ? model.parameters[static_cast<std::size_t>(c)].name
                : dose_target_name(sweep.dose_targets[static_cast<std::size_t>(-1 - c)]);
}

// The value of dimension k at sweep point `point` (the first dimension slowest).
inline double sweep_value(const Sweep& sweep, std::int64_t point, std::size_t k) {
  std::int64_t stride = 1;
  for (std::size_t j = k + 1; j < sweep.values.size(); ++j)
    stride *= static_cast<std::int64_t>(sweep.values[j].size());
  const std::int64_t idx = (point / stride) % static_cast<std::int64_t>(sweep.values[k].size());
  return sweep.values[k][static_cast<std::size_t>(idx)];
}

// Sets a dose line's swept field.
inline void set_dose_field(DoseEvent& d, DoseTarget::Field f, double v) {
  switch (f) {
    case DoseTarget::Field::Amount:
      d.amount = v;
      break;
    case DoseTarget::Field::Every:
      d.every = v;
      break;
    case DoseTarget::Field::Repeat:
      d.repeat = static_cast<std::int64_t>(v);
      break;
    case DoseTarget::Field::Duration:
      d.duration = v;
      d.rate = 0.0;
      break;
    case DoseTarget::Field::Rate:
      d.rate = v;
      d.duration = 0.0;
      break;
  }
}

// True when the sweep varies a dose property.
inline bool sweeps_doses(const Sweep& sweep) noexcept {
  for (int c : sweep.columns)
    if (c < 0) return true;
  return false;
}

// `doses` with the dose values of sweep point `point`.
inline std::vector<DoseEvent> doses_at(std::vector<DoseEvent> doses, const Sweep& sweep,
                                       std::int64_t point) {
  for (std::size_t k = 0; k < sweep.columns.size(); ++k) {
    const int c = sweep.columns[k];
    if (c >= 0) continue;
    const DoseTarget& t = sweep.dose_targets[static_cast<std::size_t>(-1 - c)];
    if (t.line >= 0 && static_cast<std::size_t>(t.line) < doses.size())
      set_dose_field(doses[static_cast<std::size_t>(t.line)], t.field,
                     sweep_value(sweep, point, k));
  }
  return doses;
}

// The groups of a run's summaries: which rows form a group, and the group's values.
class Groups {
 public:
  explicit Groups(const PopulationRun& run) : sweep_(run.sweep) {
    SummaryBy by;
    if (run.summary_by)
      by = *run.summary_by;
    else
      by.columns = run.sweep.columns;
    replicate_ = by.replicate && run.replicates > 1;
    replicates_ = run.replicates;
    base_ = base_subjects(run);
    points_ = run.sweep.points();
    // Per swept parameter (sweep order): its stride in the sweep point index, and its stride in
    // the group index within a replicate (0 when the groups do not split by it).
    std::int64_t stride = 1;
    const std::size_t n = sweep_.columns.size();
    point_stride_.assign(n, 0);
    group_stride_.assign(n, 0);
    for (std::size_t k = n; k-- > 0;) {
      point_stride_[k] = stride;
      stride *= static_cast<std::int64_t>(sweep_.values[k].size());
    }
    for (std::size_t k = n; k-- > 0;)
      if (std::find(by.columns.begin(), by.columns.end(), sweep_.columns[k]) != by.columns.end()) {
        group_stride_[k] = per_replicate_;
        per_replicate_ *= static_cast<std::int64_t>(sweep_.values[k].size());
        split_.push_back(k);
      }
    std::reverse(split_.begin(), split_.end());
  }

  // Names of the grouping columns, in extra_columns order.
  std::vector<std::string> columns(const ModelInfo& model) const {
    std::vector<std::string> names;
    if (replicate_) names.emplace_back("replicate");
    for (std::size_t k : split_) names.push_back(sweep_name(model, sweep_, k));
    return names;
  }
  // Groups kept at once, and in all.
  std::int64_t live() const noexcept { return per_replicate_; }
  std::int64_t total() const noexcept {
    return replicate_ ? per_replicate_ * replicates_ : per_replicate_;
  }
  bool by_replicate() const noexcept { return replicate_; }
  // Index among the live groups of the rows of sweep point `point`.
  std::int64_t live_index(std::int64_t point) const noexcept {
    std::int64_t g = 0;
    for (std::size_t k : split_) g += value_index(point, k) * group_stride_[k];
    return g;
  }
  // Index among the live groups of row r.
  std::int64_t live_index_of_row(std::int64_t r) const noexcept {
    return live_index((r % (points_ * base_)) / base_);
  }
  // The last row + 1 of the rows from `r` on that stay in r's group, at most `limit`.
  std::int64_t run_end(std::int64_t r, std::int64_t limit) const noexcept {
    const std::int64_t g = live_index_of_row(r);
    const std::int64_t rep = r / (points_ * base_);
    std::int64_t end = (r / base_ + 1) * base_;
    while (end < limit && end / (points_ * base_) == rep && live_index_of_row(end) == g)
      end += base_;
    return std::min(end, limit);
  }
  // The values of live group g of replicate rep (0-based): the table's `group`.
  std::vector<double> values(std::int64_t rep, std::int64_t g) const {
    std::vector<double> v;
    if (replicate_) v.push_back(static_cast<double>(rep + 1));
    for (std::size_t k : split_) {
      const std::int64_t idx =
          (g / group_stride_[k]) % static_cast<std::int64_t>(sweep_.values[k].size());
      v.push_back(sweep_.values[k][static_cast<std::size_t>(idx)]);
    }
    return v;
  }

 private:
  std::int64_t value_index(std::int64_t point, std::size_t k) const noexcept {
    return (point / point_stride_[k]) % static_cast<std::int64_t>(sweep_.values[k].size());
  }

  const Sweep& sweep_;
  bool replicate_ = false;
  std::int64_t replicates_ = 1, base_ = 1, points_ = 1, per_replicate_ = 1;
  std::vector<std::int64_t> point_stride_, group_stride_;
  std::vector<std::size_t> split_;  // swept parameters (sweep order) that split the groups
};

// The strata of a run's summaries (SummaryBy::covariate): the covariate's distinct values over
// every covariate row of the population (all arms), ascending, and each row's stratum. Without
// a covariate, one stratum and no values.
struct Strata {
  std::vector<double> values;
  std::vector<std::int32_t> of;  // per covariate row (population subject)
  std::int64_t count() const noexcept {
    return values.empty() ? 1 : static_cast<std::int64_t>(values.size());
  }
};
// @throws InvalidArgument for a covariate the population does not have, NaN values or more
// than kMaxStrata distinct values (field summary_by.covariate)
Strata strata_of(const PopulationRun& run);

// The rows of output times of the run's summaries (times x compartments).
inline std::int64_t output_times(const PopulationRun& run) noexcept {
  const Problem& p = run.problem;
  return p.output.all ? p.grid.steps + 1 : static_cast<std::int64_t>(p.output.steps.size());
}

// Arm k of a run with arms as a run of its own: its doses, scaling and count, without the arm
// grouping. Its population keeps every covariate row (its subjects are the rows after those of
// the arms before it).
PopulationRun arm_run(const PopulationRun& run, std::size_t k);

}  // namespace pkscan::detail
