// The device backends, methods `batched` and `power` (models with 2, 3 or 4 compartments),
// written once over a system's Runtime (runtime.hpp): the CUDA runtime for device 'cuda', or
// Thrust's OpenMP system on the host, which runs this file and the kernels in CI. This file has
// its entry points and the chunked pipeline of a run; the class is device_backend.hpp's, its
// device summary device_summary.cpp's.
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
#include "device/device_backend.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <pkscan/error.hpp>
#include <string>

namespace pkscan::detail {

namespace {

[[noreturn]] __attribute__((noinline, cold)) void throw_no_memory(const char* system,
                                                                  const std::string& what,
                                                                  std::size_t need,
                                                                  std::size_t avail) {
  throw DeviceError(std::string("simulate: ") + system +
                    " device memory is too small for this run: " + what + " needs " +
                    std::to_string(need) + " bytes, but only " + std::to_string(avail) +
                    " bytes may be used (10% of the device is kept free)");
}

}  // namespace

bool DeviceBackend::holds_anything() const noexcept {
  bool any = sched_.ptr() || sketch_.ptr() || status_stage_.ptr() || piece_[0].ptr() ||
             piece_[1].ptr() || piece_done_[0] || piece_done_[1];
  for (const Slot& s : slot_)
    any = any || s.stream || s.in.ptr() || s.out.ptr() || s.status.ptr() || s.table.ptr() ||
          s.sum.ptr() || s.in_stage.ptr() || s.sum_stage.ptr() || s.mark[0] || s.sum_done;
  return any;
}

void DeviceBackend::release() noexcept {
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
void DeviceBackend::quiesce() noexcept {
  for (Slot& s : slot_)
    if (s.stream) rt_->synchronize_quietly(s.stream);
}

void DeviceBackend::ensure_context() {
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
void DeviceBackend::run_guarded(const PreparedBatch& b, ResultView<Real> out) {
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

void DeviceBackend::run(const PreparedBatch& b, ResultView<double> out) { run_guarded(b, out); }
void DeviceBackend::run(const PreparedBatch& b, ResultView<float> out) { run_guarded(b, out); }

std::size_t DeviceBackend::held_device_bytes() const noexcept {
  std::size_t h = sched_.bytes() + sketch_.bytes();
  for (const Slot& s : slot_)
    h += s.in.bytes() + s.out.bytes() + s.status.bytes() + s.table.bytes() + s.sum.bytes();
  return h;
}

// Packs the schedule into sched_host_, uploads it into sched_ and returns the device view.
device::DeviceSchedule DeviceBackend::upload_schedule(const PreparedBatch& b, const Plan& plan) {
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
std::size_t DeviceBackend::slot_bytes(const Plan& p, std::int64_t m) {
  const std::size_t um = static_cast<std::size_t>(m);
  return align_up(p.in_per_subject * um, kAlign) + align_up(p.out_per_subject * um, kAlign) +
         align_up(um, kAlign) + align_up(p.table_per_subject * um, kAlign) +
         (p.summary ? SumLayout(p, m).bytes : 0);
}

// Chunk size from device memory and the pipelining target.
void DeviceBackend::plan_chunks(const PreparedBatch& b, Plan& p, std::size_t sched_bytes) {
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

// Adds a completed chunk's device times (its slot's marks) to last_device_times().
void DeviceBackend::add_times(const Slot& slot) {
  times_.kernel_seconds += rt_->elapsed_seconds(slot.mark[1], slot.mark[2]);
  times_.transfer_seconds += rt_->elapsed_seconds(slot.mark[0], slot.mark[1]) +
                             rt_->elapsed_seconds(slot.mark[3], slot.mark[4]);
}

// Copies chunk [first, first + m) back into the result and its statuses.
template <class Real>
void DeviceBackend::drain_chunk(const PreparedBatch& b, const Plan& p, std::int64_t first,
                                std::int64_t m, Slot& slot, ResultView<Real> out) {
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

// Buffers for a full chunk in each slot used (grown only when too small). plan_chunks()
// counted every cached device buffer as reusable, so when one must grow all are freed first
// (no old buffer stays next to the new ones), and an unused second slot gives its buffers
// back.
void DeviceBackend::reserve_slots(const Plan& p) {
  const std::size_t um = static_cast<std::size_t>(p.chunk);
  const std::size_t need_in = p.in_per_subject * um;
  const std::size_t need_out = p.out_per_subject * um;
  const std::size_t need_table = p.table_per_subject * um;
  const std::size_t need_sum = p.summary ? SumLayout(p, p.chunk).bytes : 0;
  const int slots = p.chunks > 1 ? 2 : 1;
  bool grow = p.summary && sketch_.bytes() < p.fixed_bytes;
  for (int i = 0; i < slots; ++i) {
    const Slot& sl = slot_[i];
    grow = grow || sl.in.bytes() < need_in || sl.out.bytes() < need_out || sl.status.bytes() < um ||
           sl.table.bytes() < need_table || sl.sum.bytes() < need_sum;
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
void DeviceBackend::run_all(const PreparedBatch& b, ResultView<Real> out) {
  Plan p = make_plan<Real>(b);
  const device::DeviceSchedule ds = upload_schedule(b, p);
  plan_chunks(b, p, sched_.bytes());
  reserve_slots(p);
  const std::size_t um = static_cast<std::size_t>(p.chunk);
  status_stage_.reserve(um);
  p.piece = std::min(rt_->piece_bytes(), p.out_per_subject * um);
  for (Buffer& pb : piece_) pb.reserve(p.piece);

  auto chunk_first = [&](std::int64_t i) { return i * p.chunk; };
  auto chunk_size = [&](std::int64_t i) { return std::min(p.chunk, b.subjects - chunk_first(i)); };
  launch_chunk<Real>(b, p, ds, chunk_first(0), chunk_size(0), slot_[0], slot_[0].stream);
  for (std::int64_t i = 0; i < p.chunks; ++i) {
    if (i + 1 < p.chunks) {
      Slot& next = slot_[(i + 1) % 2];
      launch_chunk<Real>(b, p, ds, chunk_first(i + 1), chunk_size(i + 1), next, next.stream);
    }
    drain_chunk<Real>(b, p, chunk_first(i), chunk_size(i), slot_[i % 2], out);
  }
}

std::unique_ptr<Backend> make_device_backend(Method method,
                                             std::unique_ptr<device::Runtime> runtime) {
  return std::make_unique<DeviceBackend>(method, std::move(runtime));
}

}  // namespace pkscan::detail
