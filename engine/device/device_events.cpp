// The Predictor's plans on device 'cuda' (device_events.hpp), over a system's Runtime.
//
// Once: the plans go up as plain arrays (device/walk_job.hpp): every subject's records (the walk
// makes their events), its rows' dataset columns and its offsets, and room for its events in
// processing order.
// Per call: the host's threads fill each subject's parameter rows (DatasetSetup::fill_rows, the
// CPU's checks and messages) and each row's eigendecomposition (the CPU's Propagator) straight
// into staging memory (pinned on CUDA); the rows go up in one copy, one launch walks every
// subject, and the predictions, Jacobian and statuses come back into staging, from which the
// host's threads copy them out. A row without a fast eigendecomposition sends its subject to the
// host's solver.
#include "device/device_events.hpp"

#include <algorithm>
#include <cstring>
#include <pkscan/error.hpp>
#include <string>

#include "core/dispatch.hpp"
#include "core/parallel.hpp"
#include "core/rate_structure.hpp"
#include "device/buffer.hpp"
#include "device/runtime.hpp"
#include "device/walk_host.hpp"
#include "device/walk_job.hpp"

namespace pkscan::detail {

struct DeviceEvents::Impl {
  Impl(const DatasetSetup& s, const std::vector<SubjectPlan>& p)
      : setup(s),
        plans(p),
        rt(walk_runtime(s.who)),
        plan_buf(*rt, false),
        in_buf(*rt, false),
        out_buf(*rt, false),
        jac_buf(*rt, false),
        in_stage(*rt, true),
        out_stage(*rt, true),
        stream(*rt) {}

  const DatasetSetup& setup;
  const std::vector<SubjectPlan>& plans;
  std::unique_ptr<device::Runtime> rt;
  Buffer plan_buf, in_buf, out_buf, jac_buf;
  // The call's input as it goes up (first rows, directions, rows: in_buf's layout) and its
  // output as it comes back (predictions, Jacobian, statuses), in staging memory: pinned memory
  // copies at the link's rate, the caller's pageable memory at a fraction of it.
  Buffer in_stage, out_stage;
  DeviceStream stream;  // after the buffers: drained before they are freed
  device::WalkChunk chunk;
  std::vector<std::int64_t> row_offset;  // per subject: its first row (rows of all subjects)
  std::int64_t total_rows = 0, total_obs = 0;
  std::int64_t a_columns = 0;          // columns that can move A: the most E~_k a row carries
  std::int64_t* first_row = nullptr;   // the call's (in in_stage): row_offset, or -1: host
  std::int32_t* directions = nullptr;  // the call's (in in_stage), with sensitivities
  double* rows = nullptr;              // the call's (in in_stage)
  double kernel_s = 0.0, transfer_s = 0.0;

  void upload_plans();
  template <int N>
  void fill(const double* params, int threads, bool sensitivities);
};

void DeviceEvents::Impl::upload_plans() {
  const std::int64_t n = static_cast<std::int64_t>(plans.size());
  WalkArrays a;
  for (std::int64_t s = 0; s < n; ++s) {
    const SubjectPlan& plan = plans[static_cast<std::size_t>(s)];
    a.append(plan, plan.obs_offset);
    total_obs += plan.obs_count;
  }
  row_offset = a.first_row;
  total_rows = a.rows();
  chunk.model = walk_model(setup);
  // Which columns can move A (the E~_k a row may carry with sensitivities).
  {
    std::vector<char> moves(static_cast<std::size_t>(setup.np), 0);
    const RateStructure& rs = setup.rates;
    for (std::size_t i = 0; i < rs.micro.size(); ++i)
      for (int c : {rs.micro[i], rs.clearance[i], rs.volume[i]})
        if (c >= 0) moves[static_cast<std::size_t>(c)] = 1;
    a_columns = std::count(moves.begin(), moves.end(), 1);
  }
  // Device memory: subjects, records, rows' overridden columns, scratch events (once);
  // the call's first rows, directions and rows (in_buf), predictions and statuses (out_buf), and
  // the Jacobian (jac_buf, with sensitivities).
  const std::size_t at_records = align_up(a.subjects.size() * sizeof(device::WalkSubject), kAlign);
  const std::size_t at_overridden =
      at_records + align_up(a.records.size() * sizeof(device::WalkRecord), kAlign);
  const std::size_t at_scratch =
      at_overridden + align_up(a.overridden.size() * sizeof(std::uint64_t), kAlign);
  const std::size_t plan_bytes = at_scratch + static_cast<std::size_t>(a.scratch) * sizeof(Event);
  plan_buf.reserve(plan_bytes);
  char* d = static_cast<char*>(plan_buf.ptr());
  void* sm = stream.get();
  rt->copy_to_device(d, a.subjects.data(), a.subjects.size() * sizeof(device::WalkSubject), sm);
  rt->copy_to_device(d + at_records, a.records.data(),
                     a.records.size() * sizeof(device::WalkRecord), sm);
  rt->copy_to_device(d + at_overridden, a.overridden.data(),
                     a.overridden.size() * sizeof(std::uint64_t), sm);
  rt->synchronize(sm);  // the host vectors go when this returns
  chunk.subjects = n;
  chunk.subject = reinterpret_cast<const device::WalkSubject*>(d);
  chunk.records = reinterpret_cast<const device::WalkRecord*>(d + at_records);
  chunk.overridden = reinterpret_cast<const std::uint64_t*>(d + at_overridden);
  chunk.scratch = reinterpret_cast<Event*>(d + at_scratch);

  const std::size_t at_status =
      align_up(static_cast<std::size_t>(total_obs) * sizeof(double), kAlign);
  out_buf.reserve(at_status + static_cast<std::size_t>(n));
  char* out = static_cast<char*>(out_buf.ptr());
  chunk.prediction = reinterpret_cast<double*>(out);
  chunk.status = reinterpret_cast<std::uint8_t*>(out + at_status);
}

template <int N>
void DeviceEvents::Impl::fill(const double* params, int threads, bool sensitivities) {
  struct Worker {
    std::vector<double> values;
    Propagator<N> prop;
  };
  const std::size_t np = static_cast<std::size_t>(setup.np);
  const std::size_t nd = np + 3;
  const std::int64_t stride = chunk.row_stride;
  const std::int64_t n = static_cast<std::int64_t>(plans.size());
  detail::parallel_for(
      n, threads, 64, [] { return Worker{}; },
      [&](std::int64_t s, Worker& w) {
        const std::size_t i = static_cast<std::size_t>(s);
        std::int32_t* dirs = nullptr;
        if (sensitivities) {
          dirs = directions + i * nd;
          int col[kMaxColumns], pa = 0, ps = 0;
          const int p = setup.directions(plans[i], params + i * np, col, pa, ps);
          dirs[0] = pa;
          dirs[1] = ps;
          dirs[2] = p;
          std::copy(col, col + p, dirs + 3);
        }
        const bool fast = fill_walk_rows<N>(setup, plans[i], s, params + i * np, w.values, w.prop,
                                            stride, dirs, rows + row_offset[i] * stride);
        first_row[i] = fast ? row_offset[i] : -1;
      });
}

DeviceEvents::DeviceEvents(const DatasetSetup& setup, const std::vector<SubjectPlan>& plans)
    : impl_(std::make_unique<Impl>(setup, plans)) {
  impl_->upload_plans();
}

DeviceEvents::~DeviceEvents() = default;

void DeviceEvents::predict(const double* params, int threads, double* out, double* jacobian,
                           std::vector<std::int64_t>& host) {
  Impl& d = *impl_;
  host.clear();
  const std::int64_t n = d.chunk.subjects;
  if (n == 0) return;
  const bool sens = jacobian != nullptr;
  const std::size_t np = static_cast<std::size_t>(d.setup.np);
  d.chunk.row_stride =
      device::row_stride(d.setup.n, d.setup.np) + (sens ? d.a_columns * d.setup.n * d.setup.n : 0);
  // The call's input, laid out as it goes up: first rows, directions (with sensitivities), rows.
  const std::size_t first_bytes = static_cast<std::size_t>(n) * sizeof(std::int64_t);
  const std::size_t dir_bytes =
      sens ? static_cast<std::size_t>(n) * (np + 3) * sizeof(std::int32_t) : 0;
  const std::size_t row_bytes =
      static_cast<std::size_t>(d.total_rows * d.chunk.row_stride) * sizeof(double);
  const std::size_t at_dirs = align_up(first_bytes, kAlign);
  const std::size_t at_rows = at_dirs + align_up(dir_bytes, kAlign);
  const std::size_t in_bytes = at_rows + row_bytes;
  d.in_stage.reserve(in_bytes);
  d.in_buf.reserve(in_bytes);
  char* staged = static_cast<char*>(d.in_stage.ptr());
  d.first_row = reinterpret_cast<std::int64_t*>(staged);
  d.directions = sens ? reinterpret_cast<std::int32_t*>(staged + at_dirs) : nullptr;
  d.rows = reinterpret_cast<double*>(staged + at_rows);
  with_compartments_1_to_6(
      d.setup.n, [&](auto m) { d.template fill<decltype(m)::value>(params, threads, sens); });
  char* in = static_cast<char*>(d.in_buf.ptr());
  // The call's output, laid out as it comes back: predictions, Jacobian, statuses.
  const std::size_t pred_bytes = static_cast<std::size_t>(d.total_obs) * sizeof(double);
  const std::size_t jac_bytes = sens ? pred_bytes * np : 0;
  const std::size_t at_jac = align_up(pred_bytes, kAlign);
  const std::size_t at_status = at_jac + align_up(jac_bytes, kAlign);
  d.out_stage.reserve(at_status + static_cast<std::size_t>(n));
  char* back = static_cast<char*>(d.out_stage.ptr());
  if (sens) d.jac_buf.reserve(jac_bytes);
  d.chunk.first_row = reinterpret_cast<const std::int64_t*>(in);
  d.chunk.directions = sens ? reinterpret_cast<const std::int32_t*>(in + at_dirs) : nullptr;
  d.chunk.rows = reinterpret_cast<const double*>(in + at_rows);
  d.chunk.jacobian = sens ? static_cast<double*>(d.jac_buf.ptr()) : nullptr;
  device::Runtime& rt = *d.rt;
  void* sm = d.stream.get();
  d.stream.mark(0);
  rt.copy_to_device(in, staged, in_bytes, sm);
  d.stream.mark(1);
  rt.launch_walk(d.setup.n, d.chunk, sm);
  d.stream.mark(2);
  if (pred_bytes > 0) rt.copy_to_host(back, d.chunk.prediction, pred_bytes, sm);
  if (jac_bytes > 0) rt.copy_to_host(back + at_jac, d.chunk.jacobian, jac_bytes, sm);
  rt.copy_to_host(back + at_status, d.chunk.status, static_cast<std::size_t>(n), sm);
  d.stream.mark(3);
  rt.synchronize(sm);
  d.kernel_s = d.stream.seconds(1, 2);
  d.transfer_s = d.stream.seconds(0, 1) + d.stream.seconds(2, 3);
  if (pred_bytes > 0) parallel_copy(out, back, pred_bytes, threads);
  if (jac_bytes > 0) parallel_copy(jacobian, back + at_jac, jac_bytes, threads);
  const std::uint8_t* status = reinterpret_cast<const std::uint8_t*>(back + at_status);
  for (std::int64_t s = 0; s < n; ++s)
    if (status[s] != device::kWalkOk) host.push_back(s);
}

double DeviceEvents::kernel_seconds() const noexcept { return impl_->kernel_s; }
double DeviceEvents::transfer_seconds() const noexcept { return impl_->transfer_s; }

}  // namespace pkscan::detail
