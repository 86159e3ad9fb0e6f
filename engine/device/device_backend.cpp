// The device backends, methods `batched` and `power` (models with 2, 3 or 4 compartments),
// written once over a system's Runtime (runtime.hpp): the CUDA runtime for device 'cuda', or
// Thrust's OpenMP system on the host, which runs this file and the kernels in CI.
//
// Numeric contract: transitions are built on the host in double (build_transition, as every
// other path) and uploaded in double; the kernels (subject_kernels.hpp) round K to Real and take
// every number from kernels/grid.hpp. The results are the CPU paths' bits on both systems
// (batched: the reference scan's; power: the CPU power path's, within 1e-10 relative of the
// reference: products reordered by repeated squaring): cuda/launch_cuda.cu is built with
// --fmad=false, as the CPU paths are with -ffp-contract=off. Deterministic run to run and
// independent of the chunking: one call computes one subject from start to end.
//
// Timing: each chunk's upload, kernel and copy back are bracketed by timing events on its
// stream, summed into last_device_times() (RunSummary::device_kernel_seconds and
// device_transfer_seconds).
//
// Power with dense output (every grid step reported) runs the batched kernel: every step must be
// computed and written anyway, and the power jumps would only add rounding.
//
// Pipeline (per run):
// 1. The schedule (breakpoints, rates, boluses, partial infusions, runs, sparse output steps) is
//    packed and uploaded once into one device buffer.
// 2. Subjects are split into chunks. A chunk's device buffers (inputs, output, status, power
//    table) live in one of two slots, each with its own stream. The chunk size is the smallest
//    of: all subjects; what fits twice in device memory (keeping 10% of the device free); and a
//    pipelining target of Runtime::target_chunk_bytes() of output (but never below
//    Runtime::min_chunk_subjects(), so a chunk still fills the device).
// 3. For chunk i+1 the host builds the transitions (batch.threads threads) into the slot's
//    staging buffer while the device runs chunk i, then enqueues its upload and kernel on the
//    slot's stream. Then chunk i is drained on its own stream: its output is copied back in
//    pieces of at most Runtime::piece_bytes() through two staging pieces, so piece p+1 is in
//    flight while the host copies piece p into the result.
// Device and staging buffers are cached in the backend object and grown only when too small.
// Errors: DeviceError from the runtime; BackendUnavailable when no device is usable. On an error
// the streams are drained before the exception leaves run(), so no copy is still writing into
// buffers that a later run reuses.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/threads.hpp>
#include <string>
#include <vector>

#include "core/block.hpp"
#include "device/device.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/parallel.hpp"
#include "device/buffer.hpp"
#include "device/runtime.hpp"
#include "grid/backend.hpp"
#include "grid/fused_summary.hpp"
#include "grid/schedule.hpp"
#include "grid/transition.hpp"
#include "kernels/summary.hpp"

namespace pkscan::detail {

namespace {

// Copies with non-temporal stores where the CPU has AVX: the result's lines are written without
// being read first (memcpy reads them at these sizes: a third more host memory traffic, while
// the link is writing the next piece into staging) and do not evict the staging data.
#if defined(__x86_64__)
__attribute__((target("avx"))) void stream_copy_avx(char* dst, const char* src, std::size_t bytes) {
  const std::size_t head = std::min(bytes, (32 - reinterpret_cast<std::uintptr_t>(dst) % 32) % 32);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  const std::size_t body = bytes / 128 * 128;
  for (std::size_t i = 0; i < body; i += 128)
    for (std::size_t k = 0; k < 128; k += 32)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + k),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + k)));
  std::memcpy(dst + body, src + body, bytes - body);
  _mm_sfence();
}
#endif

void stream_copy(void* dst, const void* src, std::size_t bytes) {
#if defined(__x86_64__)
  static const bool avx = __builtin_cpu_supports("avx");
  if (avx && bytes >= 4096) {  // the host system's 4 KiB pieces take this path in CI too
    stream_copy_avx(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

// Copies `bytes` from staging into the result on up to `threads` threads (the result's pages
// are often touched for the first time here, so one thread would not keep up with the link).
void parallel_copy(void* dst, const void* src, std::size_t bytes, int threads) {
  constexpr std::size_t kGrain = std::size_t{4} << 20;
  const std::int64_t parts = std::max<std::int64_t>(
      1, std::min<std::int64_t>(threads, static_cast<std::int64_t>((bytes + kGrain - 1) / kGrain)));
  const std::size_t each =
      align_up((bytes + static_cast<std::size_t>(parts) - 1) / static_cast<std::size_t>(parts), 64);
  pkscan::parallel_for(parts, static_cast<int>(parts), [&](std::int64_t p, int) {
    const std::size_t off = static_cast<std::size_t>(p) * each;
    if (off < bytes)
      stream_copy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off,
                  std::min(each, bytes - off));
  });
}

[[noreturn]] __attribute__((noinline, cold)) void throw_no_memory(const char* system,
                                                                  const std::string& what,
                                                                  std::size_t need,
                                                                  std::size_t avail) {
  throw DeviceError(std::string("simulate: ") + system +
                    " device memory is too small for this run: " + what + " needs " +
                    std::to_string(need) + " bytes, but only " + std::to_string(avail) +
                    " bytes may be used (10% of the device is kept free)");
}

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
  void run(const PreparedBatch& b, ResultView<double> out) override { run_guarded(b, out); }
  void run(const PreparedBatch& b, ResultView<float> out) override { run_guarded(b, out); }
  DeviceTimes last_device_times() const noexcept override { return times_; }

  // The device summary (device/summary_kernels.hpp): on the same terms as the CPU's fused path.
  bool can_summarize(const PreparedBatch& b, const TimeSummary& summary) const override {
    return unsupported_reason(b).empty() && FusedSummary::accepts(summary, b.subjects);
  }
  void summarize(const PreparedBatch& b, const SummaryTarget& t) override {
    if (const std::string why = unsupported_reason(b); !why.empty()) throw BackendUnavailable(why);
    FusedSummary::check_batch(*t.summary, b, t.metric_compartment, t.metrics);
    times_ = {};
    if (b.subjects <= 0) return;
    ensure_context();
    try {
      if (t.precision == Precision::Float64)
        summarize_all<double>(b, t);
      else
        summarize_all<float>(b, t);
    } catch (...) {
      quiesce();
      throw;
    }
  }

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

  bool holds_anything() const noexcept {
    bool any = sched_.ptr() || sketch_.ptr() || status_stage_.ptr() || piece_[0].ptr() ||
               piece_[1].ptr() || piece_done_[0] || piece_done_[1];
    for (const Slot& s : slot_)
      any = any || s.stream || s.in.ptr() || s.out.ptr() || s.status.ptr() || s.table.ptr() ||
            s.sum.ptr() || s.in_stage.ptr() || s.sum_stage.ptr() || s.mark[0] || s.sum_done;
    return any;
  }

  void release() noexcept {
    ready_ = false;
    device_ = -1;
    if (!holds_anything()) return;  // e.g. never ran: do not start the runtime here
    for (Slot& s : slot_)
      if (s.stream) rt_->synchronize_quietly(s.stream);
    for (Slot& s : slot_) {
      s.release_device();
      s.in_stage.release();
      s.sum_stage.release();
      if (s.sum_done) rt_->destroy_event(s.sum_done);
      s.sum_done = nullptr;
      if (s.stream) rt_->destroy_stream(s.stream);
      s.stream = nullptr;
      for (void*& e : s.mark) {
        if (e) rt_->destroy_event(e);
        e = nullptr;
      }
    }
    for (void*& e : piece_done_) {
      if (e) rt_->destroy_event(e);
      e = nullptr;
    }
    for (Buffer& p : piece_) p.release();
    status_stage_.release();
    sketch_.release();
    sched_.release();
    sched_device_.clear();
  }

  // Waits for all work of this backend, ignoring errors (exception path).
  void quiesce() noexcept {
    for (Slot& s : slot_)
      if (s.stream) rt_->synchronize_quietly(s.stream);
  }

  void ensure_context() {
    std::string why;
    if (rt_->device_count(&why) == 0)
      throw BackendUnavailable("device 'cuda' is not available: " + why);
    const int dev = rt_->current_device();
    if (ready_ && dev == device_) return;
    release();  // first use, or the caller switched devices: start afresh on this one
    try {
      for (Slot& s : slot_) {
        s.stream = rt_->create_stream();
        for (void*& e : s.mark) e = rt_->create_timing_event();
        s.sum_done = rt_->create_event();
      }
      for (void*& e : piece_done_) e = rt_->create_event();
    } catch (...) {
      release();
      throw;
    }
    device_ = dev;
    ready_ = true;
  }

  template <class Real>
  void run_guarded(const PreparedBatch& b, ResultView<Real> out) {
    if (const std::string why = unsupported_reason(b); !why.empty()) throw BackendUnavailable(why);
    times_ = {};
    if (b.subjects <= 0) return;
    if (b.out_steps.empty()) {  // nothing to report: every subject is trivially finite
      for (std::int64_t s = 0; s < b.subjects; ++s) out.status[s] = SubjectStatus::Ok;
      return;
    }
    ensure_context();
    try {
      run_all(b, out);
    } catch (...) {
      quiesce();
      throw;
    }
  }

  std::size_t held_device_bytes() const noexcept {
    std::size_t h = sched_.bytes() + sketch_.bytes();
    for (const Slot& s : slot_)
      h += s.in.bytes() + s.out.bytes() + s.status.bytes() + s.table.bytes() + s.sum.bytes();
    return h;
  }

  // Packs the schedule into sched_host_, uploads it into sched_ and returns the device view.
  device::DeviceSchedule upload_schedule(const PreparedBatch& b, const Plan& plan) {
    const Schedule& s = b.schedule;
    const std::size_t nbp = static_cast<std::size_t>(s.breakpoints());
    const std::size_t un = static_cast<std::size_t>(b.n);
    const std::size_t n_out_up = plan.dense ? 0 : b.out_steps.size();
    struct Part {
      const void* src;
      std::size_t bytes;
      std::size_t at = 0;
    };
    Part parts[] = {{s.initial.data(), un * sizeof(double)},
                    {s.bp_step.data(), nbp * sizeof(std::int64_t)},
                    {s.bp_rate.data(), nbp * un * sizeof(double)},
                    {s.bp_bolus.data(), nbp * un * sizeof(double)},
                    {s.bp_partial_begin.data(), (nbp + 1) * sizeof(std::int64_t)},
                    {s.partials.data(), s.partials.size() * sizeof(PartialInfusion)},
                    {s.bp_run.data(), nbp * sizeof(std::int64_t)},
                    {b.out_steps.data(), n_out_up * sizeof(std::int64_t)}};
    std::size_t total = 0;
    for (Part& p : parts) {
      p.at = total;
      total = align_up(total + p.bytes, kAlign);
    }
    sched_host_.assign(total, 0);
    for (const Part& p : parts)
      if (p.bytes) std::memcpy(sched_host_.data() + p.at, p.src, p.bytes);
    // The device already holds these bytes (fitting code calls again and again with the same
    // regimen): no upload, no wait.
    if (sched_host_ != sched_device_) {
      sched_device_.clear();  // until the upload below has completed
      sched_.reserve(total);
      // A pageable source: synchronising before the kernels (on both streams) read the schedule
      // orders the copy for both slots.
      rt_->copy_to_device(sched_.ptr(), sched_host_.data(), total, slot_[0].stream);
      rt_->synchronize(slot_[0].stream);
      sched_device_ = sched_host_;
    }

    const auto* d = static_cast<const unsigned char*>(sched_.ptr());
    auto at = [&](int i) { return d + parts[i].at; };
    device::DeviceSchedule ds;
    ScheduleView& v = ds.s;
    v.n = b.n;
    v.steps = s.steps;
    v.breakpoints = s.breakpoints();
    v.initial = reinterpret_cast<const double*>(at(0));
    v.bp_step = reinterpret_cast<const std::int64_t*>(at(1));
    v.bp_rate = reinterpret_cast<const double*>(at(2));
    v.bp_bolus = reinterpret_cast<const double*>(at(3));
    v.bp_partial_begin = reinterpret_cast<const std::int64_t*>(at(4));
    v.partials = reinterpret_cast<const PartialInfusion*>(at(5));
    v.bp_run = reinterpret_cast<const std::int64_t*>(at(6));
    ds.n_out = plan.n_out;
    ds.out_steps = plan.dense ? nullptr : reinterpret_cast<const std::int64_t*>(at(7));
    ds.levels = plan.levels;
    return ds;
  }

  // Device bytes of one slot holding `m` subjects.
  static std::size_t slot_bytes(const Plan& p, std::int64_t m) {
    const std::size_t um = static_cast<std::size_t>(m);
    return align_up(p.in_per_subject * um, kAlign) + align_up(p.out_per_subject * um, kAlign) +
           align_up(um, kAlign) + align_up(p.table_per_subject * um, kAlign) +
           (p.summary ? SumLayout(p, m).bytes : 0);
  }

  // Chunk size from device memory and the pipelining target.
  void plan_chunks(const PreparedBatch& b, Plan& p, std::size_t sched_bytes) {
    const std::int64_t target = std::max<std::int64_t>(
        rt_->min_chunk_subjects(),
        static_cast<std::int64_t>(rt_->target_chunk_bytes() /
                                  std::max<std::size_t>(1, p.out_per_subject)));
    // One chunk whose buffers the first slot already holds: no need to ask the device for its
    // free memory (much of a small call: docs/performance.md, "Thresholds").
    const std::size_t us = static_cast<std::size_t>(b.subjects);
    const Slot& s0 = slot_[0];
    if (b.subjects <= target && s0.in.bytes() >= p.in_per_subject * us &&
        s0.out.bytes() >= p.out_per_subject * us && s0.status.bytes() >= us &&
        s0.table.bytes() >= p.table_per_subject * us &&
        s0.in_stage.bytes() >= p.in_per_subject * us &&
        (!p.summary ||
         (s0.sum.bytes() >= SumLayout(p, b.subjects).bytes && sketch_.bytes() >= p.fixed_bytes))) {
      p.chunks = 1;
      p.chunk = b.subjects;
      return;
    }
    std::size_t free_b = 0, total_b = 0;
    rt_->memory_info(free_b, total_b);
    const std::size_t usable_all = free_b + held_device_bytes();  // ours get reused or freed
    const std::size_t keep = total_b / 10;
    const std::size_t usable = usable_all > keep ? usable_all - keep : 0;
    // The smallest chunk: one subject, or one summation block for the device summary.
    const std::int64_t unit = p.summary ? std::min(b.subjects, detail::kSubjectBlock) : 1;
    const std::size_t fixed = sched_bytes + p.fixed_bytes;
    if (fixed + 2 * slot_bytes(p, unit) > usable)
      throw_no_memory(rt_->system(),
                      p.summary ? "the schedule, the summary's sketch and one block of subjects "
                                  "per buffer slot"
                                : "the schedule and one subject per buffer slot",
                      fixed + 2 * slot_bytes(p, unit), usable);
    const std::size_t per = p.in_per_subject + p.out_per_subject + 1 + p.table_per_subject +
                            p.sum_per_subject;  // bytes per subject
    // Alignment of both slots' buffers (2 x 4, and 2 x 6 for the summary's), and the summary's
    // tail lanes.
    const std::size_t slack =
        std::size_t{8} * kAlign +
        (p.summary ? 2 * (6 * kAlign + static_cast<std::size_t>(p.rows) * 64) : 0);
    const std::size_t room = usable - fixed;
    std::int64_t fit = room > slack ? static_cast<std::int64_t>((room - slack) / (2 * per)) : 0;
    fit = std::max<std::int64_t>(fit, unit);  // one unit per slot fits (checked above)
    std::int64_t chunk = std::min({b.subjects, fit, target});
    if (p.summary) {  // whole blocks, the last chunk shorter
      if (chunk < b.subjects)
        chunk = std::max(unit, chunk / detail::kSubjectBlock * detail::kSubjectBlock);
      p.chunk = chunk;
      p.chunks = (b.subjects + chunk - 1) / chunk;
      return;
    }
    p.chunks = (b.subjects + chunk - 1) / chunk;
    p.chunk = (b.subjects + p.chunks - 1) / p.chunks;  // equal chunks, never larger than before
  }

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

  // Adds a completed chunk's device times (its slot's marks) to last_device_times().
  void add_times(const Slot& slot) {
    times_.kernel_seconds += rt_->elapsed_seconds(slot.mark[1], slot.mark[2]);
    times_.transfer_seconds += rt_->elapsed_seconds(slot.mark[0], slot.mark[1]) +
                               rt_->elapsed_seconds(slot.mark[3], slot.mark[4]);
  }

  // Copies chunk [first, first + m) back into the result and its statuses.
  template <class Real>
  void drain_chunk(const PreparedBatch& b, const Plan& p, std::int64_t first, std::int64_t m,
                   Slot& slot, ResultView<Real> out) {
    void* st = slot.stream;
    rt_->record(slot.mark[3], st);
    rt_->copy_to_host(status_stage_.ptr(), slot.status.ptr(), static_cast<std::size_t>(m), st);
    const std::size_t total = p.out_per_subject * static_cast<std::size_t>(m);
    const std::size_t piece = p.piece;
    const std::size_t pieces = (total + piece - 1) / piece;
    const auto* src = static_cast<const unsigned char*>(slot.out.ptr());
    auto* dst = reinterpret_cast<unsigned char*>(out.amounts + first * p.n_out * b.n);
    auto issue = [&](std::size_t q) {
      const std::size_t off = q * piece;
      rt_->copy_to_host(piece_[q % 2].ptr(), src + off, std::min(piece, total - off), st);
      rt_->record(piece_done_[q % 2], st);
    };
    if (pieces > 0) issue(0);
    for (std::size_t q = 0; q < pieces; ++q) {
      // Piece q+1 goes into the other staging buffer, whose previous piece (q-1) the host has
      // already copied out.
      if (q + 1 < pieces) issue(q + 1);
      rt_->wait_event(piece_done_[q % 2]);
      const std::size_t off = q * piece;
      parallel_copy(dst + off, piece_[q % 2].ptr(), std::min(piece, total - off), b.threads);
    }
    rt_->record(slot.mark[4], st);
    // Execution errors of the chunk's kernel and copies surface here (or at an event above).
    rt_->synchronize(st);
    add_times(slot);
    const auto* flags = static_cast<const std::uint8_t*>(status_stage_.ptr());
    for (std::int64_t j = 0; j < m; ++j)
      out.status[first + j] = flags[j] ? SubjectStatus::NonFinite : SubjectStatus::Ok;
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

  // Buffers for a full chunk in each slot used (grown only when too small). plan_chunks()
  // counted every cached device buffer as reusable, so when one must grow all are freed first
  // (no old buffer stays next to the new ones), and an unused second slot gives its buffers
  // back.
  void reserve_slots(const Plan& p) {
    const std::size_t um = static_cast<std::size_t>(p.chunk);
    const std::size_t need_in = p.in_per_subject * um;
    const std::size_t need_out = p.out_per_subject * um;
    const std::size_t need_table = p.table_per_subject * um;
    const std::size_t need_sum = p.summary ? SumLayout(p, p.chunk).bytes : 0;
    const int slots = p.chunks > 1 ? 2 : 1;
    bool grow = p.summary && sketch_.bytes() < p.fixed_bytes;
    for (int i = 0; i < slots; ++i) {
      const Slot& sl = slot_[i];
      grow = grow || sl.in.bytes() < need_in || sl.out.bytes() < need_out ||
             sl.status.bytes() < um || sl.table.bytes() < need_table || sl.sum.bytes() < need_sum;
    }
    if (grow) sketch_.release();
    for (int i = 0; i < 2; ++i) {
      if (grow || i >= slots) slot_[i].release_device();
      if (i >= slots) continue;
      Slot& sl = slot_[i];
      sl.in.reserve(need_in);
      sl.out.reserve(need_out);
      sl.status.reserve(um);
      sl.table.reserve(need_table);
      sl.in_stage.reserve(need_in);
      if (p.summary) {
        sl.sum.reserve(need_sum);
        sl.sum_stage.reserve(SumLayout(p, p.chunk).stage_bytes);
      }
    }
    if (p.summary) sketch_.reserve(p.fixed_bytes);
  }

  template <class Real>
  void run_all(const PreparedBatch& b, ResultView<Real> out) {
    Plan p = make_plan<Real>(b);
    const device::DeviceSchedule ds = upload_schedule(b, p);
    plan_chunks(b, p, sched_.bytes());
    reserve_slots(p);
    const std::size_t um = static_cast<std::size_t>(p.chunk);
    status_stage_.reserve(um);
    p.piece = std::min(rt_->piece_bytes(), p.out_per_subject * um);
    for (Buffer& pb : piece_) pb.reserve(p.piece);

    auto chunk_first = [&](std::int64_t i) { return i * p.chunk; };
    auto chunk_size = [&](std::int64_t i) {
      return std::min(p.chunk, b.subjects - chunk_first(i));
    };
    launch_chunk<Real>(b, p, ds, chunk_first(0), chunk_size(0), slot_[0], slot_[0].stream);
    for (std::int64_t i = 0; i < p.chunks; ++i) {
      if (i + 1 < p.chunks) {
        Slot& next = slot_[(i + 1) % 2];
        launch_chunk<Real>(b, p, ds, chunk_first(i + 1), chunk_size(i + 1), next, next.stream);
      }
      drain_chunk<Real>(b, p, chunk_first(i), chunk_size(i), slot_[i % 2], out);
    }
  }

  // ---- The device summary -------------------------------------------------------------------
  // One stream (slot 0's) orders everything, since every chunk's summary kernels update the one
  // device sketch; the two slots still let the host prepare chunk i + 1 while the device runs
  // chunk i. Only the sketch (at the start and the end) and each chunk's results and statuses
  // cross the bus. The sketch comes back into the summary's spare device sketch, which becomes
  // its device sketch only once every copy has completed, and the sums are committed then
  // (FusedSummary::swap_device_sketch and commit, neither of which throws): a failed call
  // leaves the summary as it was.

  // Copies the sketch between the host's (FusedSummary::device_sketch) and the device's.
  void copy_sketch(Sketch& h, const SketchLayout& l, std::int64_t rows, bool to_device,
                   void* stream) {
    auto* d = static_cast<unsigned char*>(sketch_.ptr());
    const std::size_t R = static_cast<std::size_t>(rows);
    struct Part {
      void* host;
      std::size_t at, bytes;
    } parts[] = {{h.counts, 0, l.counts_bytes},
                 {h.lo.data(), l.lo, R * sizeof(std::int64_t)},
                 {h.maxkey.data(), l.maxkey, R * sizeof(std::int64_t)},
                 {h.zero.data(), l.zero, R * sizeof(std::uint64_t)},
                 {h.under.data(), l.under, R * sizeof(std::uint64_t)}};
    for (const Part& q : parts) {
      if (to_device)
        rt_->copy_to_device(d + q.at, q.host, q.bytes, stream);
      else
        rt_->copy_to_host(q.host, d + q.at, q.bytes, stream);
    }
  }

  // Enqueues chunk [first, first + m): its simulation, its summary kernels and the copy of its
  // results into the slot's sum_stage.
  template <class Real>
  void enqueue_summary_chunk(const PreparedBatch& b, const Plan& p,
                             const device::DeviceSchedule& ds, device::SummaryChunk<Real> c,
                             std::int64_t first, std::int64_t m, Slot& slot, void* stream) {
    launch_chunk<Real>(b, p, ds, first, m, slot, stream);
    const SumLayout l(p, m);
    const std::int64_t nn = static_cast<std::int64_t>(b.n) * b.n;
    const std::int64_t matrices = 2 + static_cast<std::int64_t>(b.schedule.partial_lengths.size());
    auto* d = static_cast<unsigned char*>(slot.sum.ptr());
    c.subjects = m;
    c.out = static_cast<const Real*>(slot.out.ptr());
    c.inv = static_cast<const double*>(slot.in.ptr()) + matrices * nn * m;
    c.status = static_cast<const std::uint8_t*>(slot.status.ptr());
    c.excluded = d;
    c.metrics = reinterpret_cast<double*>(d + l.metrics);
    c.block_max = reinterpret_cast<std::int64_t*>(d + l.block_max);
    c.nonfinite = reinterpret_cast<std::uint32_t*>(d + l.nonfinite);
    c.block_sums = reinterpret_cast<double*>(d + l.block_sums);
    c.tail = reinterpret_cast<double*>(d + l.tail);
    for (device::SummaryStage stage : {device::SummaryStage::Clear, device::SummaryStage::BlockMax,
                                       device::SummaryStage::Subjects, device::SummaryStage::Rebase,
                                       device::SummaryStage::Count})
      rt_->launch_summary(stage, c, stream);
    rt_->record(slot.mark[2], stream);
    rt_->record(slot.mark[3], stream);
    auto* stage = static_cast<unsigned char*>(slot.sum_stage.ptr());
    rt_->copy_to_host(stage, d, l.results, stream);
    rt_->copy_to_host(stage + l.results, slot.status.ptr(), static_cast<std::size_t>(m), stream);
    rt_->record(slot.mark[4], stream);
    rt_->record(slot.sum_done, stream);
  }

  // Waits for chunk [first, first + m) and takes its results: statuses and metrics into the
  // target, block sums, tail lanes and exclusions into the batch's.
  void collect_summary_chunk(const Plan& p, const SummaryTarget& t, std::int64_t first,
                             std::int64_t m, Slot& slot, double* block_sums, double* tail,
                             unsigned char* excluded) {
    rt_->wait_event(slot.sum_done);
    add_times(slot);
    const SumLayout l(p, m);
    const auto* stage = static_cast<const unsigned char*>(slot.sum_stage.ptr());
    const std::size_t um = static_cast<std::size_t>(m);
    std::memcpy(excluded + first, stage, um);
    std::memcpy(t.metrics + first * kMetricCount, stage + l.metrics,
                um * kMetricCount * sizeof(double));
    const std::int64_t full = m / detail::kSubjectBlock;
    std::memcpy(block_sums + first / detail::kSubjectBlock * p.rows, stage + l.block_sums,
                static_cast<std::size_t>(full * p.rows) * sizeof(double));
    if (m % detail::kSubjectBlock != 0)
      std::memcpy(tail, stage + l.tail, static_cast<std::size_t>(p.rows) * 8 * sizeof(double));
    const auto* flags = stage + l.results;
    for (std::int64_t j = 0; j < m; ++j)
      t.status[first + j] = flags[j] ? SubjectStatus::NonFinite : SubjectStatus::Ok;
  }

  template <class Real>
  void summarize_all(const PreparedBatch& b, const SummaryTarget& t) {
    TimeSummary& summary = *t.summary;
    Sketch& h = FusedSummary::device_sketch(summary, false);
    Sketch& back = FusedSummary::device_sketch(summary, true);
    const std::vector<double>& times = FusedSummary::times(summary);
    Plan p = make_plan<Real>(b);
    p.summary = true;
    p.in_per_subject += static_cast<std::size_t>(b.n) * sizeof(double);  // reciprocal volumes
    // Excluded and non-finite flags, metrics, and per block of subjects a largest key and a sum
    // per row.
    p.sum_per_subject =
        1 + sizeof(std::uint32_t) + kMetricCount * sizeof(double) +
        (16 * static_cast<std::size_t>(p.rows) + detail::kSubjectBlock - 1) / detail::kSubjectBlock;
    const SketchLayout sl(h, p.rows, times.size());
    p.fixed_bytes = sl.bytes;
    const device::DeviceSchedule ds = upload_schedule(b, p);
    plan_chunks(b, p, sched_.bytes());
    reserve_slots(p);

    void* st = slot_[0].stream;
    auto* d = static_cast<unsigned char*>(sketch_.ptr());
    copy_sketch(h, sl, p.rows, true, st);
    rt_->copy_to_device(d + sl.times, times.data(), times.size() * sizeof(double), st);
    rt_->synchronize(st);  // pageable sources

    device::SummaryChunk<Real> c;
    c.n_times = static_cast<std::int64_t>(times.size());
    c.n = b.n;
    c.rows = p.rows;
    c.mc = t.metric_compartment;
    c.i0 = first_index_at_or_after(times, t.last_dose_time);
    c.times = reinterpret_cast<const double*>(d + sl.times);
    c.sk.counts = reinterpret_cast<std::uint32_t*>(d);
    c.sk.stride = h.stride;
    c.sk.width = h.width;
    c.sk.mask = h.mask;
    c.sk.lo = reinterpret_cast<std::int64_t*>(d + sl.lo);
    c.sk.maxkey = reinterpret_cast<std::int64_t*>(d + sl.maxkey);
    c.sk.zero = reinterpret_cast<unsigned long long*>(d + sl.zero);
    c.sk.under = reinterpret_cast<unsigned long long*>(d + sl.under);

    const std::int64_t S = b.subjects;
    std::vector<double> block_sums(static_cast<std::size_t>(S / detail::kSubjectBlock * p.rows));
    std::vector<double> tail(static_cast<std::size_t>(p.rows) * 8, 0.0);
    std::vector<unsigned char> excluded(static_cast<std::size_t>(S), 0);
    auto chunk_first = [&](std::int64_t i) { return i * p.chunk; };
    auto chunk_size = [&](std::int64_t i) {
      return std::min(p.chunk, b.subjects - chunk_first(i));
    };
    enqueue_summary_chunk<Real>(b, p, ds, c, chunk_first(0), chunk_size(0), slot_[0], st);
    for (std::int64_t i = 0; i < p.chunks; ++i) {
      if (i + 1 < p.chunks)
        enqueue_summary_chunk<Real>(b, p, ds, c, chunk_first(i + 1), chunk_size(i + 1),
                                    slot_[(i + 1) % 2], st);
      collect_summary_chunk(p, t, chunk_first(i), chunk_size(i), slot_[i % 2], block_sums.data(),
                            tail.data(), excluded.data());
    }
    copy_sketch(back, sl, p.rows, false, st);
    rt_->synchronize(st);
    FusedSummary::swap_device_sketch(summary);
    FusedSummary::commit(summary, S, block_sums.data(), tail.data(), excluded.data());
  }
};

}  // namespace

std::unique_ptr<Backend> make_device_backend(Method method,
                                             std::unique_ptr<device::Runtime> runtime) {
  return std::make_unique<DeviceBackend>(method, std::move(runtime));
}

}  // namespace pkscan::detail
