#pragma once
// The device backend's class, shared by its two files: device_backend.cpp (its entry points, the
// device context and the chunked two-slot pipeline of a run) and device_summary.cpp (the device
// summary). The templates that both use (a chunk's inputs and launch, a run's sizes) are here.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/threads.hpp>
#include <string>
#include <vector>

#include "core/block.hpp"
#include "core/parallel.hpp"
#include "device/buffer.hpp"
#include "device/device.hpp"
#include "device/runtime.hpp"
#include "grid/backend.hpp"
#include "grid/fused_summary.hpp"
#include "grid/schedule.hpp"
#include "grid/transition.hpp"
#include "kernels/summary.hpp"

namespace pkscan::detail {

class DeviceBackend final : public Backend {
 public:
  DeviceBackend(Method method, std::unique_ptr<device::Runtime> rt)
      : method_(method),
        rt_(std::move(rt)),
        sched_(*rt_, false),
        sketch_(*rt_, false),
        status_stage_(*rt_, true),
        piece_{Buffer(*rt_, true), Buffer(*rt_, true)},
        slot_{Slot(*rt_), Slot(*rt_)} {}  // no device work here
  DeviceBackend(const DeviceBackend&) = delete;
  DeviceBackend& operator=(const DeviceBackend&) = delete;
  ~DeviceBackend() override { release(); }

  Method method() const noexcept override { return method_; }
  Device device() const noexcept override { return Device::Cuda; }
  std::string unsupported_reason(const PreparedBatch& b) const override {
    if (b.n < device::kMinCompartments || b.n > device::kMaxCompartments)
      return "method '" + to_string(method_) + "' on device 'cuda' is compiled for models with " +
             std::to_string(device::kMinCompartments) + " to " +
             std::to_string(device::kMaxCompartments) + " compartments, not " + std::to_string(b.n);
    return {};
  }
  void run(const PreparedBatch& b, ResultView<double> out) override;
  void run(const PreparedBatch& b, ResultView<float> out) override;
  DeviceTimes last_device_times() const noexcept override { return times_; }

  // The device summary (device/summary_kernels.hpp): on the same terms as the CPU's fused path.
  bool can_summarize(const PreparedBatch& b, const TimeSummary& summary) const override {
    return unsupported_reason(b).empty() && FusedSummary::accepts(summary, b.subjects);
  }
  void summarize(const PreparedBatch& b, const SummaryTarget& t) override;

 private:
  struct Slot {
    explicit Slot(device::Runtime& rt) noexcept
        : in(rt, false),
          out(rt, false),
          status(rt, false),
          table(rt, false),
          sum(rt, false),
          in_stage(rt, true),
          sum_stage(rt, true) {}
    void* stream = nullptr;
    Buffer in;      // k, g, partial matrices (double, SoA)
    Buffer out;     // amounts
    Buffer status;  // one byte per subject
    Buffer table;   // power table (power kernel only)
    Buffer sum;     // the device summary's per-chunk results (SumLayout)
    Buffer in_stage;
    Buffer sum_stage;          // their copy on the host, with the statuses
    void* sum_done = nullptr;  // the chunk's summary results are in sum_stage
    // Timing events: before the upload, after it, after the kernel, before and after the copies
    // back (the stream may wait between the kernel and them: not counted).
    void* mark[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
    void release_device() noexcept {
      in.release();
      out.release();
      status.release();
      table.release();
      sum.release();
    }
  };

  // Per-run sizes.
  struct Plan {
    std::int64_t n_out = 0;
    bool dense = false;
    bool power = false;  // power kernel (sparse output); otherwise the batched kernel
    int levels = 0;
    std::size_t in_per_subject = 0;     // bytes
    std::size_t out_per_subject = 0;    // bytes
    std::size_t table_per_subject = 0;  // bytes
    // The device summary: per subject, the reciprocal volumes (in `in`, after the transitions)
    // and the summary's device bytes (SumLayout, amortised); the sketch and the output times
    // (fixed); chunks are whole summation blocks.
    bool summary = false;
    std::size_t sum_per_subject = 0;
    std::size_t fixed_bytes = 0;
    std::int64_t rows = 0;   // output times x compartments
    std::int64_t chunk = 0;  // subjects per chunk (capacity of a slot)
    std::int64_t chunks = 0;
    std::size_t piece = 0;  // bytes per staging piece of the way back
  };

  // The device summary's buffers of a chunk of m subjects in a slot's `sum` (offsets in bytes;
  // summary_kernels.hpp gives the arrays): its results, `results` bytes from 0 (copied into the
  // slot's `sum_stage`, the statuses after them), then the largest keys (device only).
  struct SumLayout {
    SumLayout(const Plan& p, std::int64_t m) {
      const std::size_t um = static_cast<std::size_t>(m);
      const std::size_t cells = static_cast<std::size_t>((m + detail::kSubjectBlock - 1) /
                                                         detail::kSubjectBlock * p.rows);
      metrics = align_up(um, kAlign);  // excluded at 0
      block_sums = metrics + align_up(um * kMetricCount * sizeof(double), kAlign);
      tail = block_sums + align_up(cells * sizeof(double), kAlign);
      results = tail + align_up(static_cast<std::size_t>(p.rows) * 8 * sizeof(double), kAlign);
      block_max = results;
      nonfinite = block_max + align_up(cells * sizeof(std::int64_t), kAlign);
      bytes = nonfinite + align_up(um * sizeof(std::uint32_t), kAlign);
      stage_bytes = results + align_up(um, kAlign);
    }
    std::size_t metrics = 0, block_sums = 0, tail = 0, results = 0, block_max = 0, nonfinite = 0,
                bytes = 0, stage_bytes = 0;
  };

  // The device's copy of the summary's sketch and the output times in sketch_ (offsets in bytes).
  struct SketchLayout {
    SketchLayout(const Sketch& h, std::int64_t rows, std::size_t n_times) {
      const std::size_t R = static_cast<std::size_t>(rows);
      counts_bytes = R * static_cast<std::size_t>(h.stride) * sizeof(std::uint32_t);
      lo = align_up(counts_bytes, kAlign);
      maxkey = lo + align_up(R * sizeof(std::int64_t), kAlign);
      zero = maxkey + align_up(R * sizeof(std::int64_t), kAlign);
      under = zero + align_up(R * sizeof(std::uint64_t), kAlign);
      times = under + align_up(R * sizeof(std::uint64_t), kAlign);
      bytes = times + align_up(n_times * sizeof(double), kAlign);
    }
    std::size_t counts_bytes = 0, lo = 0, maxkey = 0, zero = 0, under = 0, times = 0, bytes = 0;
  };

  Method method_;
  std::unique_ptr<device::Runtime> rt_;
  bool ready_ = false;
  int device_ = -1;
  Buffer sched_;
  Buffer sketch_;  // the device summary's sketch and output times
  Buffer status_stage_;
  Buffer piece_[2];  // staging ring of the way back
  void* piece_done_[2] = {nullptr, nullptr};
  Slot slot_[2];
  DeviceTimes times_;
  std::vector<unsigned char> sched_host_;    // packed schedule, kept for its capacity
  std::vector<unsigned char> sched_device_;  // what sched_ holds (empty: nothing known)
  // Transitions, one per host thread and compartment count, kept for their capacity.
  std::vector<Transition<2>> tr2_;
  std::vector<Transition<3>> tr3_;
  std::vector<Transition<4>> tr4_;

  template <int N>
  std::vector<Transition<N>>& transitions() {
    if constexpr (N == 2)
      return tr2_;
    else if constexpr (N == 3)
      return tr3_;
    else
      return tr4_;
  }

  // The context, the schedule, the chunk sizes and a run (device_backend.cpp).
  bool holds_anything() const noexcept;
  void release() noexcept;
  void quiesce() noexcept;
  void ensure_context();
  template <class Real>
  void run_guarded(const PreparedBatch& b, ResultView<Real> out);
  std::size_t held_device_bytes() const noexcept;
  device::DeviceSchedule upload_schedule(const PreparedBatch& b, const Plan& plan);
  static std::size_t slot_bytes(const Plan& p, std::int64_t m);
  void plan_chunks(const PreparedBatch& b, Plan& p, std::size_t sched_bytes);
  void add_times(const Slot& slot);
  template <class Real>
  void drain_chunk(const PreparedBatch& b, const Plan& p, std::int64_t first, std::int64_t m,
                   Slot& slot, ResultView<Real> out);
  void reserve_slots(const Plan& p);
  template <class Real>
  void run_all(const PreparedBatch& b, ResultView<Real> out);

  // The device summary (device_summary.cpp).
  void copy_sketch(Sketch& h, const SketchLayout& l, std::int64_t rows, bool to_device,
                   void* stream);
  template <class Real>
  void enqueue_summary_chunk(const PreparedBatch& b, const Plan& p,
                             const device::DeviceSchedule& ds, device::SummaryChunk<Real> c,
                             std::int64_t first, std::int64_t m, Slot& slot, void* stream);
  void collect_summary_chunk(const Plan& p, const SummaryTarget& t, std::int64_t first,
                             std::int64_t m, Slot& slot, double* block_sums, double* tail,
                             unsigned char* excluded);
  template <class Real>
  void summarize_all(const PreparedBatch& b, const SummaryTarget& t);

  // Builds the transitions of subjects [first, first + m) into the slot's input staging.
  // With `inv`, also the reciprocal volumes after them (the device summary's values).
  template <int N>
  void prepare_inputs_n(const PreparedBatch& b, std::int64_t first, std::int64_t m, Slot& slot,
                        bool inv) {
    const Problem& pr = *b.problem;
    const Schedule& s = b.schedule;
    const std::size_t np = s.partial_lengths.size();
    auto* k = static_cast<double*>(slot.in_stage.ptr());
    double* g = k + std::int64_t{N} * N * m;
    double* part = g + std::int64_t{N} * N * m;
    double* iv = part + static_cast<std::int64_t>(np) * N * N * m;
    const int threads =
        static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(b.threads, m)));
    std::vector<Transition<N>>& trs = transitions<N>();
    if (trs.size() < static_cast<std::size_t>(threads))
      trs.resize(static_cast<std::size_t>(threads));
    pkscan::parallel_for(
        m, threads,
        [&](std::int64_t j, int worker) {
          Transition<N>& tr = trs[static_cast<std::size_t>(worker)];
          Mat<N> a;
          rate_matrix(pr.parameters.info(), pr.parameters.row(first + j), a.data());
          build_transition<N>(a, pr.grid.dt, pr.discretization, s.partial_lengths, tr);
          for (int e = 0; e < N * N; ++e) {
            k[e * m + j] = tr.k.data()[e];
            g[e * m + j] = tr.g.data()[e];
          }
          for (std::size_t l = 0; l < np; ++l)
            for (int e = 0; e < N * N; ++e)
              part[(static_cast<std::int64_t>(l) * N * N + e) * m + j] = tr.partial[l].data()[e];
          if (inv)
            for (int c = 0; c < N; ++c) iv[j * N + c] = reciprocal_volume(b, first + j, c);
        },
        64);
  }

  // Host preparation, upload and kernel of one chunk on its slot's stream.
  template <class Real>
  void launch_chunk(const PreparedBatch& b, const Plan& p, const device::DeviceSchedule& ds,
                    std::int64_t first, std::int64_t m, Slot& slot, void* stream) {
    with_compartments_2_to_4(
        b.n, [&](auto n) { prepare_inputs_n<decltype(n)::value>(b, first, m, slot, p.summary); });
    const std::size_t in_bytes = p.in_per_subject * static_cast<std::size_t>(m);
    rt_->record(slot.mark[0], stream);
    rt_->copy_to_device(slot.in.ptr(), slot.in_stage.ptr(), in_bytes, stream);
    rt_->record(slot.mark[1], stream);
    device::DeviceChunk<Real> dc;
    dc.subjects = m;
    dc.k = static_cast<const double*>(slot.in.ptr());
    const std::int64_t nn = static_cast<std::int64_t>(b.n) * b.n;
    dc.g = dc.k + nn * m;
    dc.partial = b.schedule.partial_lengths.empty() ? nullptr : dc.g + nn * m;
    dc.table = p.power ? static_cast<Real*>(slot.table.ptr()) : nullptr;
    dc.out = static_cast<Real*>(slot.out.ptr());
    dc.status = static_cast<std::uint8_t*>(slot.status.ptr());
    dc.time_major = p.summary;  // summarised on the device (summary_kernels.hpp's layout)
    rt_->launch(p.power ? device::Kernel::PowerSparse : device::Kernel::Batched, b.n, ds, dc,
                stream);
    rt_->record(slot.mark[2], stream);
  }

  // The sizes of a run of the batch in precision Real.
  template <class Real>
  Plan make_plan(const PreparedBatch& b) const {
    const Schedule& s = b.schedule;
    Plan p;
    p.n_out = static_cast<std::int64_t>(b.out_steps.size());
    p.dense = p.n_out == s.steps + 1;  // sorted, distinct, in [0, steps]: exactly 0..steps
    p.power = method_ == Method::Power && !p.dense;
    if (p.power) p.levels = power_levels(s.steps);
    const std::size_t nn = static_cast<std::size_t>(b.n) * static_cast<std::size_t>(b.n);
    p.in_per_subject = (2 + s.partial_lengths.size()) * nn * sizeof(double);
    p.out_per_subject =
        static_cast<std::size_t>(p.n_out) * static_cast<std::size_t>(b.n) * sizeof(Real);
    p.table_per_subject = p.power ? static_cast<std::size_t>(p.levels) * 2 * nn * sizeof(Real) : 0;
    p.rows = p.n_out * b.n;
    return p;
  }
};

}  // namespace pkscan::detail
