#pragma once
// The fused simulate-and-summarise path of population runs (engine/grid/fused_summary.cpp): the
// lane kernel of the batched CPU backend runs over windows of output times for blocks of 1024
// subjects and each window is summarised while it is in the thread's cache, so the
// trajectories are never stored. The batched CPU backend's summarize() (reached through
// Engine::summarize_into); bit-identical to simulate + TimeSummary::add + subject_metrics.
#include <cstdint>
#include <memory>
#include <pkscan/result.hpp>
#include <pkscan/summary.hpp>
#include <vector>

#include "core/block.hpp"
#include "grid/backend.hpp"
#include "summary/sketch.hpp"

namespace pkscan::detail {

struct Refinement;

// Per-thread scratch of the fused summary, kept between calls: a population run calls once per
// chunk, and fresh memory would be faulted in and zeroed every time (about 1.4 MiB per thread
// for 3 compartments and 1000 output times). Owned by the batched CPU backend, so by the
// Engine; a slot holds the scratch of one compartment count and precision at a time.
struct FusedScratch {
  struct Slot {
    virtual ~Slot() = default;
  };
  std::vector<std::unique_ptr<Slot>> per_thread;  // by OpenMP thread number
};

struct FusedSummary {
  // True when add_batch() may take `subjects` more subjects: the summary's next subject starts
  // a block of 1024 (its sums start afresh), and its percentiles are estimated by the sketch
  // once these subjects are added (no values are kept).
  static bool accepts(const TimeSummary& summary, std::int64_t subjects) noexcept;

  // Simulates the batch (2 to 4 compartments, the batched backend's arithmetic) and adds every
  // subject to `summary`; writes the metrics of `metric_compartment` (subjects x
  // kMetricCount) and each subject's status. `seconds`, when not null, receives the threads'
  // seconds in the recurrence, the sums and sketch, and the metrics (summed over threads).
  // @throws InvalidArgument as TimeSummary::add for mismatched times or compartments, a metric
  //         compartment out of range or a null `metrics`
  // The checks of add_batch, shared with the device summary.
  // @throws as add_batch
  static void check_batch(const TimeSummary& summary, const PreparedBatch& batch,
                          int metric_compartment, const double* metrics);
  // Adds a summarised batch of S subjects that check_batch accepted: the sums of its complete
  // blocks of kSubjectBlock subjects (block_sums[block * rows + row]), the 8 lane sums of its last,
  // incomplete block (tail[row * 8 + lane]) and its excluded subjects (excluded[s] != 0). The
  // summary leaves its exact phase.
  static void commit(TimeSummary& summary, std::int64_t S, const double* block_sums,
                     const double* tail, const unsigned char* excluded) noexcept;
  // commit() with the number of excluded subjects instead of their flags.
  static void commit_counts(TimeSummary& summary, std::int64_t S, const double* block_sums,
                            const double* tail, std::int64_t excluded) noexcept;

  // A run split over processes (RunExchange): a rank other than 0 summarises each of its units
  // that starts a block of its group in a summary of its own (`worker`, exact_values 0, in
  // capture mode: see TimeSummary::Impl::capture), by add() or the fused path, and sends rank 0
  // what commit_counts() takes, read by take_capture(): the sums of the unit's complete blocks,
  // the lanes of its last incomplete block (zeros when none; tail[row * 8 + lane]) and its
  // excluded subjects. The worker's sketch keeps every value; its sums and counts restart.
  static void start_capture(TimeSummary& worker) noexcept;
  static void take_capture(TimeSummary& worker, std::vector<double>& block_sums,
                           std::vector<double>& tail, std::int64_t& excluded);
  // The sketches of `worker` (add()'s, the fused path's per thread, the device's), and a sketch
  // added to `summary` for finish() and the passes to merge with its own (as the fused path's
  // per-thread sketches).
  static std::vector<const Sketch*> sketches(const TimeSummary& worker);
  static void adopt_sketch(TimeSummary& summary, std::unique_ptr<Sketch, SketchFree> sketch);
  // The output rows (times x compartments) and the sketch window of `summary`.
  static std::int64_t rows(const TimeSummary& summary) noexcept;
  static int window_binades(const TimeSummary& summary) noexcept;

  static const std::vector<double>& times(const TimeSummary& summary) noexcept;
  // Passes of exact percentiles split over processes (RunExchange): the pass open on `summary`
  // (null when none), and a pass planned by rank 0 opened on a rank's own summary (`worker`,
  // whose add() then feeds it; null closes it).
  static Refinement* open_pass(TimeSummary& summary) noexcept;
  static void set_pass(TimeSummary& worker, std::unique_ptr<Refinement> pass) noexcept;
  // The sketch the device summary keeps in the summary (empty until first asked for), which
  // finish() merges with the others, or (`spare`) the one it copies the device's back into.
  static Sketch& device_sketch(TimeSummary& summary, bool spare);
  // The spare becomes the device sketch (once the device's state is in it).
  static void swap_device_sketch(TimeSummary& summary) noexcept;

  static void add_batch(TimeSummary& summary, const PreparedBatch& batch, Precision precision,
                        int metric_compartment, double last_dose_time, double* metrics,
                        SubjectStatus* status, FusedScratch& scratch, double* seconds = nullptr);
};

}  // namespace pkscan::detail
