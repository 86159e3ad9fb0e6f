// Batched CPU backend: subjects in blocks of W SIMD lanes, each block run by the kernel of the
// machine's instruction set (grid/batched_block.hpp, compiled once per set in files of its own),
// blocks on OpenMP threads. Bit-identical to the reference scan (grid/batched_block.hpp's
// numeric contract). Deterministic: a subject's result does not depend on the thread count, the
// block it falls in, or its lane.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/parallel.hpp"
#include "grid/backend.hpp"
#include "grid/batched_block.hpp"
#include "grid/fused_summary.hpp"
#include "grid/reference.hpp"

namespace pkscan::detail {

namespace {

using batched::Block;
using batched::Isa;
using batched::IsaTag;
using batched::run_block_isa;

#if PKSCAN_ISA_TARGETS
std::atomic<int> isa_cap{0};  // cap_batched_isa
// The best instruction set of the machine, chosen once per process as PKSCAN_CLONES's loader
// chooses its clone (less the cap).
Isa machine_isa() {
  static const Isa isa = __builtin_cpu_supports("x86-64-v4")   ? Isa::Avx512
                         : __builtin_cpu_supports("x86-64-v3") ? Isa::Avx2
                                                               : Isa::Base;
  const int cap = isa_cap.load(std::memory_order_relaxed);  // k-th set down from the best
  return cap > 0 ? static_cast<Isa>(std::max(0, static_cast<int>(isa) - (cap - 1))) : isa;
}
#endif

// Subjects [first, first + count) on the machine's instruction set.
template <int N, class Real>
void run_block(const PreparedBatch& b, std::int64_t first, std::int64_t count, Real* out,
               SubjectStatus* st, std::vector<Transition<N>>& tr, Block<N, Real>& B) {
#if PKSCAN_ISA_TARGETS
  switch (machine_isa()) {
    case Isa::Avx512:
      return run_block_isa(IsaTag<Isa::Avx512>{}, b, first, count, out, st, tr, B);
    case Isa::Avx2:
      return run_block_isa(IsaTag<Isa::Avx2>{}, b, first, count, out, st, tr, B);
    case Isa::Base:
      break;
  }
#endif
  run_block_isa(IsaTag<Isa::Base>{}, b, first, count, out, st, tr, B);
}

class BatchedCpuBackend final : public CompiledCpuBackend<BatchedCpuBackend, Method::Batched> {
 public:
  // The fused summary (fused_summary.cpp): the lane kernel without storing the trajectories.
  bool can_summarize(const PreparedBatch& b, const TimeSummary& summary) const override {
    return FusedSummary::accepts(summary, b.subjects);
  }
  void summarize(const PreparedBatch& b, const SummaryTarget& t) override {
    FusedSummary::add_batch(*t.summary, b, t.precision, t.metric_compartment, t.last_dose_time,
                            t.metrics, t.status, fused_scratch_, t.seconds);
  }

 private:
  FusedScratch fused_scratch_;  // kept between calls of summarize()

 public:
  template <int N, class Real>
  void run_all(const PreparedBatch& b, ResultView<Real> out) {
    const std::int64_t stride = static_cast<std::int64_t>(b.out_steps.size()) * b.n;
    if (b.subjects < 3) {
      // One or two subjects: the per-subject reference loop. A lane group steps as fast as one
      // subject does (its latency bounds it), and from three subjects on it is the faster one
      // (N = 10 .. 2 subjects, T = 1e3 dense: docs/performance.md); below, the reference's
      // direct row writes win.
      RegionError err;
#pragma omp parallel for schedule(dynamic, 1) \
    num_threads(std::max(1, std::min <int>(b.threads, static_cast <int>(b.subjects))))
      for (std::int64_t s = 0; s < b.subjects; ++s)
        err.guard([&] { reference_subject<Real>(b, s, out.amounts + s * stride, out.status + s); });
      err.rethrow();
      return;
    }
    constexpr int kBlock = Block<N, Real>::kSubjects;
    constexpr int W = Block<N, Real>::W;
    // Work items: blocks of two lane groups (whose recurrences overlap), or, when there are
    // fewer blocks than threads, single lane groups, so that each thread runs chains of its own
    // (N = 10, T = 1e3 dense: docs/performance.md).
    const std::int64_t blocks = (b.subjects + kBlock - 1) / kBlock;
    const std::int64_t unit = blocks < b.threads && b.subjects > W ? W : kBlock;
    const std::int64_t items = (b.subjects + unit - 1) / unit;
    auto count = [&](std::int64_t i) { return std::min(unit, b.subjects - i * unit); };
    if (b.threads <= 1 || items == 1) {
      // One thread: no parallel region (its start costs much of a call of a few subjects:
      // docs/performance.md, "Thresholds"), and the thread's scratch is reused from call to call.
      Scratch<N, Real>& w = scratch<N, Real>(0, std::min(unit, b.subjects));
      for (std::int64_t i = 0; i < items; ++i)
        run_block(b, i * unit, count(i), out.amounts, out.status, w.tr, *w.block);
      return;
    }
    RegionError err;
    const int team = static_cast<int>(std::min<std::int64_t>(b.threads, items));
    if (scratch_.size() < static_cast<std::size_t>(team)) scratch_.resize(team);
#pragma omp parallel num_threads(team)
    {
      Scratch<N, Real>* w = nullptr;
      err.guard([&] { w = &scratch<N, Real>(omp_get_thread_num(), std::min(unit, b.subjects)); });
#pragma omp for schedule(dynamic, items >= 16 * b.threads ? 4 : 1)
      for (std::int64_t i = 0; i < items; ++i)
        if (w && !err.failed())
          err.guard(
              [&] { run_block(b, i * unit, count(i), out.amounts, out.status, w->tr, *w->block); });
    }
    err.rethrow();
  }

 private:
  // A thread's transitions and block buffers, kept by the backend (so by the Engine) for its
  // later calls: a fitting loop calls with a few subjects millions of times, and fresh buffers
  // cost an allocation and its first touch each time. One per OpenMP thread number, for one
  // compartment count and precision at a time: the block's lanes and staged rows (about 33 KiB
  // for three compartments in float64, left uninitialised: the kernel writes before it reads)
  // and a transition per subject of the largest work item so far.
  struct ScratchSlot {
    virtual ~ScratchSlot() = default;
  };
  template <int N, class Real>
  struct Scratch final : ScratchSlot {
    std::vector<Transition<N>> tr;
    std::unique_ptr<Block<N, Real>> block;
  };
  template <int N, class Real>
  Scratch<N, Real>& scratch(int thread, std::int64_t subjects) {
    if (scratch_.empty()) scratch_.resize(1);
    std::unique_ptr<ScratchSlot>& slot = scratch_[static_cast<std::size_t>(thread)];
    auto* w = dynamic_cast<Scratch<N, Real>*>(slot.get());
    if (!w) {
      auto fresh = std::make_unique<Scratch<N, Real>>();
      fresh->block.reset(new Block<N, Real>);  // default-initialised: not zeroed
      w = fresh.get();
      slot = std::move(fresh);
    }
    if (w->tr.size() < static_cast<std::size_t>(subjects))
      w->tr.resize(static_cast<std::size_t>(subjects));
    return *w;
  }
  std::vector<std::unique_ptr<ScratchSlot>> scratch_;  // by OpenMP thread number
};

}  // namespace

int cap_batched_isa(int k) {
#if PKSCAN_ISA_TARGETS
  isa_cap.store(0, std::memory_order_relaxed);
  const int sets = static_cast<int>(machine_isa()) + 1;
  isa_cap.store(k, std::memory_order_relaxed);
  return sets;
#else
  (void)k;
  return 1;
#endif
}

std::unique_ptr<Backend> make_batched_cpu_backend() {
  return std::make_unique<BatchedCpuBackend>();
}

}  // namespace pkscan::detail
