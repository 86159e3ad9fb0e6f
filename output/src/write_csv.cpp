#include <algorithm>
#include <charconv>
#include <cmath>
#include <pkscan/models/model.hpp>
#include <pkscan/output/output.hpp>
#include <string>
#include <vector>

#include "csv_format.hpp"

namespace pkscan::output {

using detail::csv_field;

namespace {
using detail::put;  // shortest round-trip text, for the value's own type

// Returns the subjects whose status is not Ok or whose rows hold a value that is not finite (a
// concentration overflows where a volume is subnormal).
template <class Real>
std::int64_t write_rows(const SimulationResult& r, const Array<Real>& amounts, AtomicFile& out) {
  std::int64_t non_finite = 0;
  const int n = r.compartments();
  const std::int64_t times = r.times();
  char line[1024];
  char* const end = line + sizeof line;
  std::vector<Real> inv(static_cast<std::size_t>(n));
  for (std::int64_t s = 0; s < r.subjects(); ++s) {
    // Concentrations are amounts / volume, divided here at write time (deferred division).
    for (int c = 0; c < n; ++c)
      inv[static_cast<std::size_t>(c)] = static_cast<Real>(r.volume(s, c));
    bool finite = true;
    for (std::int64_t t = 0; t < times; ++t) {
      const Real* a = amounts.data() + (s * times + t) * n;
      char* p = put(line, end, s + 1);
      *p++ = ',';
      p = put(p, end, r.output_times()[static_cast<std::size_t>(t)]);
      for (int c = 0; c < n; ++c) {
        *p++ = ',';
        p = put(p, end, a[c]);
      }
      for (int c = 0; c < n; ++c) {
        *p++ = ',';
        const Real conc = static_cast<Real>(a[c] / inv[static_cast<std::size_t>(c)]);
        finite = finite && std::isfinite(conc);
        p = put(p, end, conc);
      }
      *p++ = '\n';
      out.write(line, static_cast<std::size_t>(p - line));
    }
    non_finite += !finite || r.status()[static_cast<std::size_t>(s)] != SubjectStatus::Ok;
  }
  return non_finite;
}

// The start of a result file's header: id, time, the amounts and the concentrations.
std::string header_start(const ModelInfo& model) {
  std::string header = "id,time";
  for (const std::string& c : model.compartments) header += ",amount_" + c;
  for (const std::string& c : model.compartments) header += ",conc_" + c;
  return header;
}

// The output unit of `path`, which also removes the `stale` files when it commits.
AtomicFile& open_unit(OutputUnit& unit, const std::string& path,
                      const std::vector<std::string>& stale) {
  AtomicFile& out = unit.add(path);
  for (const std::string& s : stale) unit.remove_on_commit(s);
  return out;
}
}  // namespace

std::int64_t write_csv(const SimulationResult& result, const ModelInfo& model,
                       const std::string& path, const std::vector<std::string>& stale) {
  OutputUnit unit(path);
  AtomicFile& out = open_unit(unit, path, stale);
  const std::string header = header_start(model) + '\n';
  out.write(header.data(), header.size());
  const std::int64_t non_finite = result.precision() == Precision::Float64
                                      ? write_rows(result, result.amounts_f64(), out)
                                      : write_rows(result, result.amounts_f32(), out);
  unit.commit();
  return non_finite;
}

namespace {

// Rows [r0, r1) of a dataset run's result, appended to `out`; flags[s] = 1 for a subject whose
// rows hold a value that is not finite (an amount, a concentration: an amount divided by a
// subnormal volume overflows, or the prediction).
void put_dataset_rows(const DatasetResult& r, const Dataset& data, std::int64_t r0, std::int64_t r1,
                      std::vector<char>& out, std::vector<char>& flags) {
  const int n = r.compartments;
  std::string line;
  char num[64];
  auto put_num = [&](double v) {
    line += ',';
    line.append(num, static_cast<std::size_t>(std::to_chars(num, num + sizeof num, v).ptr - num));
  };
  for (std::int64_t i = r0; i < r1; ++i) {
    const std::size_t ui = static_cast<std::size_t>(i);
    const DatasetSubject& subj = data.subjects[static_cast<std::size_t>(r.subject[ui])];
    const DatasetRecord& rec = subj.records[static_cast<std::size_t>(r.record[ui])];
    line = csv_field(subj.id);
    put_num(r.time[ui]);
    for (int c = 0; c < n; ++c)
      put_num(r.amounts[ui * static_cast<std::size_t>(n) + static_cast<std::size_t>(c)]);
    for (int c = 0; c < n; ++c)
      put_num(r.concentrations[ui * static_cast<std::size_t>(n) + static_cast<std::size_t>(c)]);
    if (std::isnan(rec.dv))
      line += ',';
    else
      put_num(rec.dv);
    put_num(r.prediction[ui]);
    bool finite = std::isfinite(r.prediction[ui]);
    for (std::size_t c = ui * static_cast<std::size_t>(n);
         c < (ui + 1) * static_cast<std::size_t>(n); ++c)
      finite = finite && std::isfinite(r.amounts[c]) && std::isfinite(r.concentrations[c]);
    if (!finite) flags[static_cast<std::size_t>(r.subject[ui])] = 1;
    for (const std::string& cov : rec.covariates) line += "," + csv_field(cov);
    line += '\n';
    out.insert(out.end(), line.begin(), line.end());
  }
}

// The subjects flagged, or whose status is not Ok.
std::int64_t count_non_finite(const DatasetResult& r, const std::vector<char>& flags) {
  std::int64_t count = 0;
  for (std::size_t s = 0; s < flags.size(); ++s)
    count += flags[s] != 0 || r.status[s] != SubjectStatus::Ok;
  return count;
}

}  // namespace

std::string dataset_csv_header(const Dataset& data, const ModelInfo& model) {
  check_dataset_columns(data, model);
  std::string header;
  for (const std::string& c : dataset_result_columns(model))
    header += (header.empty() ? "" : ",") + c;
  for (const std::string& c : data.covariate_columns) header += "," + csv_field(c);
  header += '\n';
  return header;
}

std::int64_t format_dataset_rows(const DatasetResult& result, const Dataset& data,
                                 std::vector<char>& bytes) {
  std::vector<char> flags(result.status.size(), 0);
  put_dataset_rows(result, data, 0, result.rows(), bytes, flags);
  return count_non_finite(result, flags);
}

std::int64_t write_dataset_csv(const DatasetResult& r, const Dataset& data, const ModelInfo& model,
                               const std::string& path, const std::vector<std::string>& stale) {
  const std::string header = dataset_csv_header(data, model);
  OutputUnit unit(path);
  AtomicFile& out = open_unit(unit, path, stale);
  out.write(header.data(), header.size());
  std::vector<char> flags(r.status.size(), 0);
  std::vector<char> rows;
  constexpr std::int64_t kRows = 4096;  // rows formatted at a time
  for (std::int64_t r0 = 0; r0 < r.rows(); r0 += kRows) {
    rows.clear();
    put_dataset_rows(r, data, r0, std::min(r.rows(), r0 + kRows), rows, flags);
    out.write(rows.data(), rows.size());
  }
  unit.commit();
  return count_non_finite(r, flags);
}

}  // namespace pkscan::output
