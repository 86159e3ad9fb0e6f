// Population and sweep runs, chunk by chunk into a ResultSink (see pkscan/population_run.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <pkscan/engine.hpp>
#include <pkscan/error.hpp>
#include <pkscan/population.hpp>
#include <pkscan/population_run.hpp>
#include <pkscan/summary.hpp>
#include <pkscan/threads.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "api/plan.hpp"
#include "api/select_subjects.hpp"
#include "core/block.hpp"
#include "core/parallel.hpp"
#include "core/validate.hpp"
#include "grid/fused_summary.hpp"
#include "population/arm_sink.hpp"
#include "population/exchange.hpp"
#include "population/residual.hpp"
#include "population/run_parts.hpp"
#include "population/run_rows.hpp"

namespace pkscan {

using detail::base_subjects;
using detail::dose_parts;
using detail::DosePart;
using detail::Groups;
using detail::model_of;
using detail::observe;
using detail::output_times;

namespace {

// Subjects' draws per thread woken (PopulationSampler::sample: about 0.2 us each; a thread is
// worth waking for some tens of microseconds of work).
constexpr double kDrawsPerThread = 256.0;

// `next_unit`: the number of the run's first unit in this part (RunExchange; arms continue
// the numbering).
PopulationRunReport run_part(const PopulationRun& spec, const PopulationSampler* sampler,
                             std::int64_t first_subject, ResultSink& sink,
                             const PopulationRunOptions& options, std::int64_t& next_unit) {
  const RunLayout layout = population_layout(spec);  // checks the run first
  const Problem& base = spec.problem;
  const std::shared_ptr<const ModelInfo>& model_ptr = model_of(spec);
  const ModelInfo& model = *model_ptr;
  const int n_params = static_cast<int>(model.parameters.size());
  const std::int64_t n_base = base_subjects(spec);
  const std::int64_t points = spec.sweep.points();
  const std::int64_t per_rep = points * n_base;
  const std::int64_t total = population_rows(spec);
  const bool with_replicate = spec.replicates > 1;

  SimulateOptions sim = spec.options;
  sim.concentrations = false;  // sinks and summaries divide by volumes as they read
  const std::vector<double>& times = layout.times;

  // Rows per call: the engine's plan for this run.
  Problem planned = base;
  planned.parameters = ParameterBatch(model_ptr, 1);  // the run's model (a population's)
  std::vector<DosePart> parts = dose_parts(base.doses, spec.dose_scaling);
  const bool scaled = parts.size() > 1 || (!parts.empty() && parts[0].scaling != nullptr);
  // A sweep of dose properties: every call holds one sweep point, whose doses it simulates.
  const bool dose_sweep = detail::sweeps_doses(spec.sweep);
  std::int64_t doses_point = -1;  // the sweep point whose doses `problem` and `parts` hold
  // Scaled doses summarise the scaled amounts, and strata their subjects: the summaries are not
  // fused into the simulation.
  const detail::Strata strata = detail::strata_of(spec);
  const bool stratified = spec.summaries && !strata.values.empty();
  // Split over processes (RunExchange): units go to rank unit mod size; rank 0 summarises and
  // writes. A unit sent to rank 0 carries its amounts, so it is never fused.
  RunExchange* const exchange =
      options.exchange && options.exchange->size() > 1 ? options.exchange : nullptr;
  const int rank = exchange ? exchange->rank() : 0;
  const std::int64_t chunk = detail::plan_chunk_rows(
      planned, sim, total, options.chunk_rows,
      !exchange && spec.summaries && !spec.trajectories && !scaled && !stratified);

  const int n_extra = static_cast<int>(layout.extra_columns.size());
  const int n_metrics = static_cast<int>(layout.metric_names.size());

  // One summary per live group (see population_run.hpp) and stratum (summary i: group
  // i / n_strata, stratum i % n_strata); they share the exact-value budget.
  const Groups groups(spec);
  const std::int64_t n_strata = strata.count();
  const std::int64_t live = groups.live() * n_strata;
  const auto group_values = [&](std::int64_t rep, std::int64_t i) {
    std::vector<double> v = groups.values(rep, i / n_strata);
    if (stratified) v.push_back(strata.values[static_cast<std::size_t>(i % n_strata)]);
    return v;
  };
  std::vector<TimeSummary> summaries;
  // Split over processes: a group that leaves its exact phase is summarised by the rank of each
  // unit that starts one of its blocks (its partial sums and, at the group's end, its sketch go
  // to rank 0); other units travel with their amounts. Without trajectories only (a unit with
  // trajectories carries its amounts anyway), and not by stratum.
  const std::int64_t group_rows = (groups.by_replicate() ? per_rep : total) / groups.live();
  const bool partial = exchange && spec.summaries && !spec.trajectories && !stratified &&
                       static_cast<double>(group_rows) * static_cast<double>(output_times(spec)) *
                               static_cast<double>(model.compartments.size()) >
                           static_cast<double>(TimeSummaryOptions{}.exact_values / live);
  std::vector<TimeSummary> workers;         // a rank other than 0: its share of each group
  std::vector<std::int64_t> offsets(live);  // per group: its subjects before the next unit
  // Summaries of every live group into `into`: rank 0's with their share of the exact-value
  // budget, another rank's (its own share of a group, or of a pass) with none.
  const auto make_summaries = [&](std::vector<TimeSummary>& into) {
    TimeSummaryOptions to;
    to.percentiles = spec.percentiles;
    to.threads = sim.threads;
    to.exact_values = rank == 0 ? to.exact_values / live : 0;
    for (std::int64_t g = 0; g < live; ++g)
      into.emplace_back(times, static_cast<int>(model.compartments.size()), to);
  };
  const auto start_summaries = [&] {
    summaries.clear();
    workers.clear();
    std::fill(offsets.begin(), offsets.end(), 0);
    if (!spec.summaries) return;
    if (rank == 0 || partial) make_summaries(rank == 0 ? summaries : workers);
    for (TimeSummary& w : workers) detail::FusedSummary::start_capture(w);
  };
  // The groups' sketches of every rank other than 0, at the end of the groups (partial).
  const auto exchange_sketches = [&] {
    if (!partial) return;
    std::vector<char> m;
    for (std::int64_t g = 0; g < live; ++g) {
      if (rank != 0) {
        detail::pack_sketch(workers[static_cast<std::size_t>(g)], m);
        exchange->send(m);
        continue;
      }
      for (int r = 1; r < exchange->size(); ++r) {
        exchange->receive(r, m);
        detail::unpack_sketch(m, r, summaries[static_cast<std::size_t>(g)]);
      }
    }
  };
  // Summaries across replicates: per live group, every replicate's statistics (times x
  // compartments x (mean, percentiles)), in replicate order.
  const bool across = !spec.replicate_percentiles.empty();
  const std::size_t n_stats = 1 + spec.percentiles.size();
  std::vector<std::vector<double>> kept(across ? static_cast<std::size_t>(live) : 0);
  const auto write_summaries = [&](std::int64_t rep) {
    for (std::int64_t g = 0; g < live; ++g) {
      TimeSummaryTable t = summaries[static_cast<std::size_t>(g)].finish();
      if (!layout.summary_columns.empty()) t.group = group_values(rep, g);
      sink.write_summary(t);
      if (!across) continue;
      std::vector<double>& k = kept[static_cast<std::size_t>(g)];
      const std::size_t rows = t.mean.size();  // times x compartments
      for (std::size_t i = 0; i < rows; ++i) {
        k.push_back(t.mean[i]);
        for (std::size_t q = 0; q + 1 < n_stats; ++q)
          k.push_back(t.quantiles[i * (n_stats - 1) + q]);
      }
    }
  };
  const auto write_across = [&] {
    ReplicateSummaryTable a;
    a.times = times;
    a.compartments = static_cast<int>(model.compartments.size());
    a.statistics.emplace_back("mean");
    for (double q : spec.percentiles) a.statistics.push_back("p" + format_value(q));
    a.percentiles = spec.replicate_percentiles;
    a.replicates = spec.replicates;
    const std::size_t block = times.size() * model.compartments.size() * n_stats;
    std::vector<double> v(static_cast<std::size_t>(spec.replicates));
    for (std::int64_t g = 0; g < live; ++g) {
      const std::vector<double>& k = kept[static_cast<std::size_t>(g)];
      a.values.assign(block * a.percentiles.size(), 0.0);
      for (std::size_t i = 0; i < block; ++i) {
        bool finite = true;
        for (std::size_t r = 0; r < v.size(); ++r) {
          v[r] = k[r * block + i];
          finite = finite && !std::isnan(v[r]);
        }
        std::sort(v.begin(), v.end());
        for (std::size_t q = 0; q < a.percentiles.size(); ++q)
          a.values[i * a.percentiles.size() + q] = finite
                                                       ? sorted_percentile(v, a.percentiles[q])
                                                       : std::numeric_limits<double>::quiet_NaN();
      }
      a.group = group_values(0, g);
      a.group.erase(a.group.begin());  // without the replicate
      sink.write_replicate_summary(a);
    }
  };
  start_summaries();
  double last_dose = last_dose_time(base.doses);  // the metrics' (of the call's doses)

  Engine engine;
  SimulationResult result;
  SimulationResult part_result;  // a further dose part's amounts (scaled doses)
  std::vector<double> factors;   // the chunk's subjects' factors of a scaled dose part
  Problem problem = base;
  std::vector<std::int64_t> ids;
  std::vector<double> extra;
  std::vector<double> metrics;
  std::vector<double> etas;
  const int n_etas = static_cast<int>(layout.eta_columns.size());
  std::vector<double> ipred, dv;
  std::vector<std::int8_t> blq;
  PopulationRunReport report;
  auto sweep_value = [&](std::int64_t point, std::size_t k) {
    return detail::sweep_value(spec.sweep, point, k);
  };

  // The rows of the call that starts at row `first`: at most `rows`, in one summary group (and
  // with a dose sweep one sweep point), ending at `end` at the latest.
  const auto call_rows = [&](std::int64_t first, std::int64_t end, std::int64_t rows) {
    std::int64_t n = spec.summaries ? groups.run_end(first, std::min(end, first + rows)) - first
                                    : std::min(rows, end - first);
    if (dose_sweep) n = std::min(n, (first / n_base + 1) * n_base - first);
    return n;
  };
  // Fills the call's problem (parameters; a dose sweep point's doses), ids, extra columns and
  // etas for rows [first, first + n).
  std::int64_t chunk_first = 0;  // the first row of the chunk fill() made
  const auto fill = [&](std::int64_t first, std::int64_t n) {
    if (dose_sweep) {
      const std::int64_t point = (first % per_rep) / n_base;
      if (point != doses_point) {
        doses_point = point;
        problem.doses = detail::doses_at(base.doses, spec.sweep, point);
        parts = dose_parts(problem.doses, spec.dose_scaling);
        last_dose = last_dose_time(problem.doses);
      }
    }
    // Every value of the chunk is written below (sampled or copied), so a batch of the same size
    // is reused rather than allocated and faulted in again.
    if (problem.parameters.subjects() != n || &problem.parameters.info() != model_ptr.get())
      problem.parameters = ParameterBatch(model_ptr, n);
    double* rows = problem.parameters.mutable_values();  // n x n_params, filled below
    ids.resize(static_cast<std::size_t>(n));
    extra.resize(static_cast<std::size_t>(n * n_extra));
    etas.resize(static_cast<std::size_t>(n * n_etas));
    // Fill the chunk segment by segment: a segment is a run of rows with the same replicate
    // and sweep point, i.e. consecutive subjects of the base population.
    std::int64_t r = first;
    while (r < first + n) {
      const std::int64_t rep = r / per_rep;
      const std::int64_t point = (r % per_rep) / n_base;
      const std::int64_t subj = r % n_base;
      const std::int64_t len = std::min(first + n - r, n_base - subj);
      double* out = rows + (r - first) * n_params;
      if (sampler) {
        // The run's threads, as many as the subjects' draws are worth waking (about 0.2 us
        // each): the draws are the same for any count.
        sampler->sample(rep, first_subject + subj, len, out,
                        n_etas ? etas.data() + (r - first) * n_etas : nullptr,
                        detail::threads_for_work(resolve_threads(sim.threads),
                                                 static_cast<double>(len), kDrawsPerThread));
      } else {
        for (std::int64_t i = 0; i < len; ++i)
          std::copy_n(base.parameters.row(subj + i), n_params, out + i * n_params);
      }
      for (std::size_t k = 0; k < spec.sweep.columns.size(); ++k) {
        const int col = spec.sweep.columns[k];
        if (col < 0) continue;  // a dose property: the call's doses
        const double v = sweep_value(point, k);
        // With a population the grid value is the typical value: individual values scale with
        // it (parameter = typical * effects * exp(eta)).
        const double typical =
            sampler ? spec.population->typical[static_cast<std::size_t>(col)] : 0.0;
        for (std::int64_t i = 0; i < len; ++i) {
          double& x = out[i * n_params + col];
          x = (sampler && typical != 0.0 && std::isfinite(typical)) ? x * (v / typical) : v;
        }
      }
      for (std::int64_t i = 0; i < len; ++i) {
        const std::int64_t row = r - first + i;
        ids[static_cast<std::size_t>(row)] = point * n_base + subj + i + 1;
        double* e = extra.data() + row * n_extra;
        int k = 0;
        if (with_replicate) e[k++] = static_cast<double>(rep + 1);
        for (std::size_t j = 0; j < spec.sweep.columns.size(); ++j) e[k++] = sweep_value(point, j);
      }
      r += len;
    }
    chunk_first = first;
  };
  // The engine checks the chunk's parameter rows (Engine::check) and names the first bad one by
  // its row in the chunk (field "parameters[i].NAME"); the run names it by its replicate and
  // subject id instead. Other errors pass unchanged.
  const auto named = [&](auto&& call) {
    try {
      call();
    } catch (const DomainError& e) {
      static constexpr std::string_view kRow = "parameters[";
      const std::string& f = e.field();
      const std::size_t close = f.find(']');
      if (f.rfind(kRow, 0) != 0 || close == std::string::npos) throw;
      const std::int64_t i = std::stoll(f.substr(kRow.size(), close - kRow.size()));
      if (i < 0 || i >= problem.parameters.subjects()) throw;
      const std::string msg = check_parameters(model, problem.parameters.row(i));
      if (msg.empty()) throw;
      const std::int64_t g = chunk_first + i;
      throw DomainError(
          (with_replicate ? "replicate " + std::to_string(g / per_rep + 1) + ", " : std::string()) +
          "subject " + std::to_string(ids[static_cast<std::size_t>(i)]) + ": " + msg);
    }
  };
  // Simulates the amounts of rows [first, first + n) (filled): part by part with scaled doses.
  const auto simulate_chunk = [&](std::int64_t first, std::int64_t n) {
    if (!scaled) {
      named([&] { engine.simulate_into(problem, sim, result); });
      return;
    }
    const std::size_t nc = spec.population->covariate_names.size();
    for (std::size_t p = 0; p < parts.size(); ++p) {
      problem.doses = parts[p].doses;
      const DoseScaling* sc = parts[p].scaling;
      if (sc) {
        factors.resize(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) {
          const std::int64_t subject = first_subject + (first + i) % n_base;
          factors[static_cast<std::size_t>(i)] =
              sc->factor(spec.population->covariates[static_cast<std::size_t>(subject) * nc +
                                                     static_cast<std::size_t>(sc->covariate)]);
        }
      }
      if (p == 0) {
        named([&] { engine.simulate_into(problem, sim, result); });
        if (sc) result.scale_subjects(factors.data());
      } else {
        named([&] { engine.simulate_into(problem, sim, part_result); });
        result.add_scaled(part_result, factors.data());
      }
    }
  };
  // Exact percentiles: passes over rows [lo, hi), whose groups are complete, until every
  // summary's percentiles are exact (TimeSummary::begin_pass). A pass simulates the rows of the
  // groups in it again, as the first pass did; nothing is written.
  const std::int64_t pass_chunk = detail::pass_chunk_rows(planned, sim, total);
  // Stratified summaries: the simulated rows [first, first + n) of live group `group`, each
  // stratum's into its summary (in a pass, only those in it).
  std::vector<std::vector<std::int64_t>> picks(stratified ? static_cast<std::size_t>(n_strata) : 0);
  SimulationResult stratum_result;
  const auto add_strata = [&](std::int64_t first, std::int64_t n, std::int64_t group, bool pass,
                              std::vector<TimeSummary>& into) {
    for (auto& p : picks) p.clear();
    for (std::int64_t i = 0; i < n; ++i)
      picks[static_cast<std::size_t>(
                strata.of[static_cast<std::size_t>(first_subject + (first + i) % n_base)])]
          .push_back(i);
    for (std::int64_t k = 0; k < n_strata; ++k) {
      TimeSummary& s = into[static_cast<std::size_t>(group * n_strata + k)];
      const std::vector<std::int64_t>& pick = picks[static_cast<std::size_t>(k)];
      if (pick.empty() || (pass && !s.in_pass())) continue;
      detail::select_subjects(result, pick.data(), static_cast<std::int64_t>(pick.size()),
                              stratum_result);
      s.add(stratum_result);
    }
  };
  // Split over processes that can broadcast, every rank runs the calls i of a pass with
  // i mod size its rank, into summaries of its own (`pass_workers`) opened on rank 0's plan,
  // and rank 0 merges what they found; otherwise rank 0 runs the passes alone.
  const bool split_passes = exchange && exchange->can_broadcast();
  std::vector<TimeSummary> pass_workers;
  std::vector<char> plan;
  // `last`: the passes after the last chunk (options.pass_progress reports them).
  const auto refine = [&](std::int64_t lo, std::int64_t hi, bool last) {
    if (!spec.exact_percentiles || !spec.summaries || (rank != 0 && !split_passes)) return;
    if (rank != 0 && pass_workers.empty()) make_summaries(pass_workers);
    std::vector<TimeSummary>& mine = rank == 0 ? summaries : pass_workers;
    for (int pass = 1;; ++pass) {
      bool any = false;
      if (rank == 0)
        for (TimeSummary& s : summaries) any = s.begin_pass() || any;
      if (split_passes) {
        if (rank == 0) detail::pack_pass_plan(summaries, plan);
        exchange->broadcast(plan);
        if (rank != 0) any = detail::unpack_pass_plan(plan, pass_workers);
      }
      if (!any) return;
      std::int64_t call = 0;
      for (std::int64_t first = lo, n = 0; first < hi; first += n, ++call) {
        n = call_rows(first, hi, pass_chunk);
        if (split_passes && call % exchange->size() != rank) continue;
        const std::int64_t group = groups.live_index_of_row(first);
        bool in = false;
        for (std::int64_t k = 0; k < n_strata; ++k)
          in = in || mine[static_cast<std::size_t>(group * n_strata + k)].in_pass();
        if (in) {
          fill(first, n);
          simulate_chunk(first, n);
          if (stratified)
            add_strata(first, n, group, true, mine);
          else
            mine[static_cast<std::size_t>(group)].add(result);
        }
        if (last && options.pass_progress) options.pass_progress(pass, first + n - lo, hi - lo);
      }
      if (split_passes) {
        if (rank != 0) {
          detail::pack_pass_values(pass_workers, plan);
          exchange->send(plan);
          continue;
        }
        for (int r = 1; r < exchange->size(); ++r) {
          exchange->receive(r, plan);
          detail::unpack_pass_values(plan, r, summaries);
        }
      }
      for (TimeSummary& s : summaries)
        if (s.in_pass()) s.end_pass();
    }
  };

  // The chunk of rows [first, ...) of `result` with these columns, as the sink takes it.
  const auto chunk_of =
      [&](std::int64_t first, const double* parameters, const std::vector<std::int64_t>& c_ids,
          const std::vector<double>& c_extra, const std::vector<double>& c_metrics,
          const std::vector<double>& c_etas, const std::vector<double>& c_ipred,
          const std::vector<double>& c_dv, const std::vector<std::int8_t>& c_blq) {
        Chunk c;
        c.first = first;
        c.result = &result;
        c.ids = c_ids.data();
        c.extra = n_extra ? c_extra.data() : nullptr;
        c.parameters = parameters;
        c.metrics = spec.summaries ? c_metrics.data() : nullptr;
        c.etas = n_etas ? c_etas.data() : nullptr;
        if (layout.observations) {
          c.ipred = c_ipred.data();
          c.dv = c_dv.data();
        }
        if (layout.blq) c.blq = c_blq.data();
        return c;
      };
  // A unit of another rank: simulated with its metrics and observations, sent to rank 0.
  detail::UnitColumns in;  // a unit received from another rank (its parameters included)
  std::vector<char> message;
  // `starts_block`: the unit's first row starts a block of its summary group.
  const auto send_unit = [&](std::int64_t first, std::int64_t n, bool starts_block) {
    fill(first, n);
    const std::int64_t g = spec.summaries ? groups.live_index_of_row(first) : 0;
    in.partial = false;
    in.metrics.resize(spec.summaries ? static_cast<std::size_t>(n * n_metrics) : 0);
    if (partial && starts_block) {
      // Summarised here, as rank 0 would (fused where it can), only the sums sent.
      TimeSummary& w = workers[static_cast<std::size_t>(g)];
      if (scaled) {
        simulate_chunk(first, n);
        w.add(result, layout.metric_compartment, last_dose, in.metrics.data());
      } else {
        named([&] {
          engine.summarize_into(problem, sim, w, layout.metric_compartment, last_dose,
                                in.metrics.data(), result);
        });
      }
      detail::take_partial(w, result, in);
    } else {
      simulate_chunk(first, n);
      if (spec.summaries)
        subject_metrics(result, layout.metric_compartment, last_dose, in.metrics.data(),
                        sim.threads);
      if (spec.residual)
        observe(spec, layout, result, first, n, per_rep, n_base, first_subject, in.ipred, in.dv,
                in.blq);
    }
    // Rows formatted here when the sink can (CSV): rank 0 then only appends them, and the
    // columns stay here (the amounts too, unless rank 0 summarises them).
    in.formatted = sink.format(chunk_of(first, problem.parameters.mutable_values(), ids, extra,
                                        in.metrics, etas, in.ipred, in.dv, in.blq),
                               in.bytes);
    const double* params = problem.parameters.mutable_values();
    std::size_t n_values = static_cast<std::size_t>(n * n_params);
    if (in.formatted) {
      in.ids.clear();
      for (auto* v : {&in.extra, &in.metrics, &in.etas, &in.ipred, &in.dv}) v->clear();
      in.blq.clear();
      n_values = 0;
      if (!spec.summaries) detail::drop_amounts(result);
    } else {
      in.ids = ids;
      in.extra = extra;
      in.etas = etas;
      in.bytes.clear();
    }
    detail::pack_unit(first, result, in, params, n_values, message);
    exchange->send(message);
  };
  // Rank 0: the unit of rank `from`, into the chunk's buffers and its group's summary.
  const auto receive_unit = [&](int from, std::int64_t first, std::int64_t n) {
    exchange->receive(from, message);
    if (detail::unpack_unit(message, from, result, in) != first || result.subjects() != n)
      throw Error("rank " + std::to_string(from) + " sent rows other than " +
                  std::to_string(first + 1) + " to " + std::to_string(first + n));
    std::swap(ids, in.ids);
    std::swap(extra, in.extra);
    std::swap(etas, in.etas);
    std::swap(metrics, in.metrics);
    std::swap(ipred, in.ipred);
    std::swap(dv, in.dv);
    std::swap(blq, in.blq);
    TimeSummary* summary =
        spec.summaries ? &summaries[static_cast<std::size_t>(groups.live_index_of_row(first))]
                       : nullptr;
    if (in.partial) {
      if (summary == nullptr || stratified)
        throw Error("rank " + std::to_string(from) + " sent summary sums this run does not have");
      detail::commit_partial(*summary, n, in);
    } else if (stratified)
      add_strata(first, n, groups.live_index_of_row(first), false, summaries);
    else if (summary)
      summary->add(result);
  };

  for (std::int64_t first = 0, n = 0; first < total; first += n) {
    n = call_rows(first, total, chunk);
    const std::int64_t unit = next_unit++;
    const int owner = exchange ? static_cast<int>(unit % exchange->size()) : 0;
    if (owner == rank && exchange) exchange->before_unit(unit);
    const bool replicate_end =
        spec.summaries && groups.by_replicate() && (first + n) % per_rep == 0;
    // Every rank follows each group's subjects, so all agree on which units start a block.
    bool starts_block = false;
    if (spec.summaries) {
      std::int64_t& at = offsets[static_cast<std::size_t>(groups.live_index_of_row(first))];
      starts_block = at % detail::kSubjectBlock == 0;
      at += n;
    }
    if (rank != 0) {
      if (owner == rank) {
        send_unit(first, n, starts_block);
        report.rows += n;
        ++report.chunks;
      }
      if (replicate_end) {
        exchange_sketches();
        refine(first + n - per_rep, first + n, false);
        start_summaries();
      }
      continue;
    }
    const bool local = owner == 0;
    if (!local) {
      receive_unit(owner, first, n);
    } else if (stratified) {
      fill(first, n);
      metrics.resize(static_cast<std::size_t>(n * n_metrics));
      simulate_chunk(first, n);
      subject_metrics(result, layout.metric_compartment, last_dose, metrics.data(), sim.threads);
      add_strata(first, n, groups.live_index_of_row(first), false, summaries);
    } else if (spec.summaries) {
      fill(first, n);
      TimeSummary& summary = summaries[static_cast<std::size_t>(groups.live_index_of_row(first))];
      metrics.resize(static_cast<std::size_t>(n * n_metrics));
      if (spec.trajectories || scaled) {
        simulate_chunk(first, n);
        summary.add(result, layout.metric_compartment, last_dose, metrics.data());
      } else {
        // Summaries only: the engine summarises as it simulates (fused) when it can.
        named([&] {
          engine.summarize_into(problem, sim, summary, layout.metric_compartment, last_dose,
                                metrics.data(), result);
        });
      }
    } else {
      fill(first, n);
      simulate_chunk(first, n);
    }
    if (spec.residual && local)
      observe(spec, layout, result, first, n, per_rep, n_base, first_subject, ipred, dv, blq);
    if (!local && in.formatted) {
      Chunk c;
      c.first = first;
      c.result = &result;
      sink.write_formatted(c, in.bytes);
    } else {
      sink.write(chunk_of(first, local ? problem.parameters.mutable_values() : in.parameters.data(),
                          ids, extra, metrics, etas, ipred, dv, blq));
    }
    const RunSummary& s = result.summary();
    report.summary.method = s.method;
    report.summary.device = s.device;
    report.summary.threads = s.threads;
    report.summary.prepare_seconds += s.prepare_seconds;
    report.summary.scan_seconds += s.scan_seconds;
    report.summary.non_finite_subjects += s.non_finite_subjects;
    report.rows += n;
    ++report.chunks;
    // A replicate's groups are complete after its last row.
    if (replicate_end) {
      exchange_sketches();
      refine(first + n - per_rep, first + n, false);
      write_summaries((first + n) / per_rep - 1);
      if (first + n < total) start_summaries();
    }
    if (options.progress) options.progress(report.rows, total);
  }
  if (spec.summaries && !groups.by_replicate()) {
    exchange_sketches();
    refine(0, total, true);
  }
  if (rank != 0) return report;
  if (spec.summaries && !groups.by_replicate()) write_summaries(0);
  if (across) write_across();
  return report;
}

// Runs the parts of a run (the whole run, or its arms) and commits the sink once every rank
// has finished (RunExchange): a rank other than 0 reports "done", or its error, to rank 0.
template <class Parts>
PopulationRunReport run_parts(const PopulationRunOptions& options, ResultSink& sink,
                              Parts&& parts) {
  RunExchange* const exchange =
      options.exchange && options.exchange->size() > 1 ? options.exchange : nullptr;
  if (!exchange) {
    PopulationRunReport report = parts();
    sink.commit();
    return report;
  }
  return detail::run_split(*exchange, parts, [&] { sink.commit(); });
}

}  // namespace

void ResultSink::write_formatted(const Chunk& /*chunk*/, const std::vector<char>& /*bytes*/) {
  throw InvalidArgument("ResultSink::write_formatted: this sink does not take formatted chunks");
}

void RunExchange::broadcast(std::vector<char>& /*message*/) {
  throw InvalidArgument("RunExchange::broadcast: this exchange cannot broadcast");
}

PopulationRunReport run_population(const PopulationRun& spec, ResultSink& sink,
                                   const PopulationRunOptions& options) {
  check_population_run(spec);
  std::unique_ptr<PopulationSampler> sampler;
  if (spec.population) sampler = std::make_unique<PopulationSampler>(*spec.population);
  std::int64_t next_unit = 0;
  if (spec.arms.empty())
    return run_parts(options, sink,
                     [&] { return run_part(spec, sampler.get(), 0, sink, options, next_unit); });
  // Arm by arm into the run's sink: the arm's number goes first among the extra columns and
  // the summary groups, rows and ids continue from the arms before.
  const RunLayout layout = population_layout(spec);
  detail::ArmSink arms(sink, spec.population->count);
  const std::int64_t total = population_rows(spec);
  return run_parts(options, sink, [&] {
    PopulationRunReport report;
    std::int64_t first_subject = 0;
    std::int64_t rows_before = 0;  // rows of the arms before this one
    for (std::size_t k = 0; k < spec.arms.size(); ++k) {
      const PopulationRun sub = detail::arm_run(spec, k);
      arms.start(static_cast<std::int64_t>(k), rows_before, first_subject, spec.arms[k].count,
                 static_cast<int>(layout.extra_columns.size()) - 1);
      PopulationRunOptions o = options;
      if (options.progress)
        o.progress = [&](std::int64_t done, std::int64_t) {
          options.progress(rows_before + done, total);
        };
      const PopulationRunReport r = run_part(sub, sampler.get(), first_subject, arms, o, next_unit);
      report.rows += r.rows;
      report.chunks += r.chunks;
      report.summary.method = r.summary.method;
      report.summary.device = r.summary.device;
      report.summary.threads = r.summary.threads;
      report.summary.prepare_seconds += r.summary.prepare_seconds;
      report.summary.scan_seconds += r.summary.scan_seconds;
      report.summary.non_finite_subjects += r.summary.non_finite_subjects;
      first_subject += spec.arms[k].count;
      rows_before += population_rows(sub);
    }
    return report;
  });
}

}  // namespace pkscan
