// The device backend's summary (DeviceBackend::summarize, device_backend.hpp): a run's chunks
// go through the two-slot pipeline of device_backend.cpp and are summarised on the device
// (summary_kernels.hpp) on the same terms as the CPU's fused path.
//
// One stream (slot 0's) orders everything, since every chunk's summary kernels update the one
// device sketch; the two slots still let the host prepare chunk i + 1 while the device runs
// chunk i. Only the sketch (at the start and the end) and each chunk's results and statuses
// cross the bus. The sketch comes back into the summary's spare device sketch, which becomes
// its device sketch only once every copy has completed, and the sums are committed then
// (FusedSummary::swap_device_sketch and commit, neither of which throws): a failed call
// leaves the summary as it was.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <pkscan/error.hpp>
#include <string>
#include <vector>

#include "device/device_backend.hpp"

namespace pkscan::detail {

void DeviceBackend::summarize(const PreparedBatch& b, const SummaryTarget& t) {
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

// Copies the sketch between the host's (FusedSummary::device_sketch) and the device's.
void DeviceBackend::copy_sketch(Sketch& h, const SketchLayout& l, std::int64_t rows, bool to_device,
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
void DeviceBackend::enqueue_summary_chunk(const PreparedBatch& b, const Plan& p,
                                          const device::DeviceSchedule& ds,
                                          device::SummaryChunk<Real> c, std::int64_t first,
                                          std::int64_t m, Slot& slot, void* stream) {
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
  for (device::SummaryStage stage :
       {device::SummaryStage::Clear, device::SummaryStage::BlockMax, device::SummaryStage::Subjects,
        device::SummaryStage::Rebase, device::SummaryStage::Count})
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
void DeviceBackend::collect_summary_chunk(const Plan& p, const SummaryTarget& t, std::int64_t first,
                                          std::int64_t m, Slot& slot, double* block_sums,
                                          double* tail, unsigned char* excluded) {
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
void DeviceBackend::summarize_all(const PreparedBatch& b, const SummaryTarget& t) {
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
  auto chunk_size = [&](std::int64_t i) { return std::min(p.chunk, b.subjects - chunk_first(i)); };
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

}  // namespace pkscan::detail
