// Fuzz target: NONMEM-format datasets (CSV) through pkscan::parse_dataset, for the
// three-compartment model (3 compartments) and the two-compartment model (2 compartments), then
// check_dataset (the engine's validation of a dataset run, without simulating).
//
// Expected outcome for any input: a Dataset that keeps the documented invariants of
// engine/include/pkscan/dataset.hpp, or a pkscan::Error. Anything else is a finding: a crash, a
// sanitizer report, a broken invariant (abort), an exception that is not a pkscan::Error (it
// escapes this function: std::terminate), a hang or a leak.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <pkscan/dataset.hpp>
#include <pkscan/error.hpp>
#include <pkscan/events.hpp>
#include <pkscan/models/model.hpp>
#include <pkscan/types.hpp>
#include <string>
#include <utility>
#include <vector>

namespace {

[[noreturn]] void broken(const char* what, std::int64_t line) {
  std::fprintf(stderr, "fuzz_dataset: invariant broken: %s (record line %lld)\n", what,
               static_cast<long long>(line));
  std::abort();
}

// The promises of dataset.hpp about a parsed dataset.
void check_invariants(const pkscan::Dataset& d, int compartments) {
  if (d.subjects.empty()) broken("no subjects", 0);
  std::int64_t records = 0, observations = 0, last_line = 0;
  for (const pkscan::DatasetSubject& s : d.subjects) {
    if (s.records.empty()) broken("a subject without records", 0);
    double last_time = 0.0;
    bool first = true;
    for (const pkscan::DatasetRecord& r : s.records) {
      ++records;
      if (r.evid == 0) ++observations;
      if (r.line <= last_line) broken("records not in file order", r.line);
      last_line = r.line;
      if (!std::isfinite(r.time) || r.time < 0.0) broken("TIME not finite and >= 0", r.line);
      if (!first && r.time < last_time) broken("TIME decreases within a subject", r.line);
      first = false;
      last_time = r.time;
      if (r.evid < 0 || r.evid > 4) broken("EVID outside 0..4", r.line);
      if (!(r.amt >= 0.0) || !std::isfinite(r.amt)) broken("AMT not finite and >= 0", r.line);
      if (!(r.rate >= 0.0) || !std::isfinite(r.rate)) broken("RATE not finite and >= 0", r.line);
      if (r.cmt < 0 || r.cmt > compartments) broken("CMT outside 0..compartments", r.line);
      if (!(r.ii >= 0.0) || !std::isfinite(r.ii)) broken("II not finite and >= 0", r.line);
      if (r.addl < 0) broken("ADDL < 0", r.line);
      if (r.addl > 0 && !(r.ii > 0.0)) broken("ADDL > 0 without II > 0", r.line);
      if (r.ss < 0 || r.ss > 2) broken("SS outside 0..2", r.line);
      if (r.ss > 0 && !(r.ii > 0.0) && !(r.ss == 1 && r.rate > 0.0 && r.amt == 0.0))
        broken("SS > 0 without II > 0", r.line);
      if (r.is_dose() && !(r.amt > 0.0) && r.ss == 0) broken("a dose without AMT > 0", r.line);
      if (!r.is_dose() &&
          (r.amt != 0.0 || r.rate != 0.0 || r.ii != 0.0 || r.addl != 0 || r.ss != 0))
        broken("dosing information on a record that is not a dose", r.line);
      if (r.evid != 0 && !r.mdv) broken("MDV 0 on a record that is not an observation", r.line);
      if (std::isinf(r.dv)) broken("DV infinite", r.line);
      for (double v : r.parameters)
        if (std::isinf(v)) broken("a parameter value is infinite", r.line);
      if (r.parameters.size() != d.parameter_columns.size())
        broken("parameters do not match parameter_columns", r.line);
      if (r.covariates.size() != d.covariate_columns.size())
        broken("covariates do not match covariate_columns", r.line);
    }
  }
  if (d.record_count() != records) broken("record_count()", 0);
  if (d.observation_count() != observations) broken("observation_count()", 0);
}

void run_model(const std::string& text, pkscan::ModelKind kind) {
  const pkscan::ModelInfo& model = pkscan::model_info(kind);
  const int compartments = static_cast<int>(model.compartments.size());
  try {
    const pkscan::Dataset d = pkscan::parse_dataset(text, "fuzz.csv", model);
    check_invariants(d, compartments);
    // Fall-back parameters: the defaults, 1 for required ones (micro constants, not clearances).
    pkscan::ParameterBatch batch(kind, static_cast<std::int64_t>(d.subjects.size()));
    std::vector<char> clearance(model.parameters.size(), 0);
    for (const pkscan::ParameterAlternative& a : model.alternatives)
      for (int c : a.clearance) clearance[static_cast<std::size_t>(c)] = 1;
    for (std::size_t i = 0; i < model.parameters.size(); ++i)
      if (std::isnan(model.parameters[i].default_value) && !clearance[i])
        batch.set_all(model.parameters[i].name, 1.0);
    pkscan::check_dataset(d, batch);
  } catch (const pkscan::Error&) {
    // Bad input (or parameter values the engine rejects), reported as documented.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  run_model(text, pkscan::ModelKind::ThreeCompartment);
  run_model(text, pkscan::ModelKind::TwoCompartment);
  return 0;
}
