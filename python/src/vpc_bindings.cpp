// pkscan.vpc: visual predictive checks of a dataset against replicates of its own design, through
// the library's pkscan::run_vpc (as `pkscan vpc` runs it), returned as the columns of the VPC's
// table (output::vpc_columns) and the observations as compared.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"

namespace pkscan::python {

namespace {

constexpr const char* kVpcDoc = R"doc(
Visual predictive check: the observations of a dataset against replicates of its own design
simulated with a population model, binned by time (pkscan vpc without a run file).

dataset, typical, model, iiv, iov, effects, residual, lloq, seed, replicates, method, threads:
as for simulate_design (the same arguments simulate the same replicates); residual is required
and replicates >= 2. The observations are the dataset's observation records (EVID 0) with a DV
and MDV 0. Per bin (and stratum): the observed percentiles (type 7, numpy.percentile's
default) of the observed DV; each replicate's same percentiles of its simulated DV and, across
the replicates, the `interval` % prediction interval of each (its lower and upper
(100 - interval) / 2 percentiles and its median); with lloq, the fraction below the LLOQ,
observed (DV < LLOQ) and simulated (the BLQ flags), with the same interval.

percentiles: ascending, in [0, 100]. interval: in (0, 100). bins: automatic bins by equal
numbers of observations when there are more distinct times (0: one bin per distinct time up to
20 of them, else 10). bin_edges: ascending times (bin k is [edge_k, edge_k+1), the last holds
its upper edge; every observation must lie within them); None: automatic per stratum.
prediction_corrected: multiply every observed and simulated value by PRED_bin / PRED (Bergstrand
et al. 2011; PRED the record's population prediction, eta = kappa = 0). stratify: a dataset
column whose values split the observations into strata.

Returns a dict with one row per bin (strata in order of first appearance, bins by time): with
stratify 'stratum' (list of str), 'bin' (1-based), 'lower' and 'upper' (the bin's time edges),
'time' (median observation time), 'observations', 'observed' [bins, percentiles], 'simulated'
[bins, percentiles, 3] (PI low, median, PI high), with lloq 'observed_blq' [bins] and
'simulated_blq' [bins, 3]; the observations as compared (prediction-corrected in a pcVPC), bin
by bin: 'observation_time', 'observation_value', 'observation_stratum' (index into 'strata');
'strata', 'stratify' (the column or None), 'percentiles', 'interval', 'replicates',
'prediction_corrected'. The GIL is released while the replicates run.
)doc";

py::dict vpc_py(py::handle dataset, py::handle typical, py::handle model, py::handle iiv,
                py::handle iov, py::handle effects, py::handle residual, py::handle lloq,
                std::uint64_t seed, std::int64_t replicates, const std::string& method, int threads,
                std::vector<double> percentiles, double interval, int bins,
                std::optional<std::vector<double>> bin_edges, bool prediction_corrected,
                std::optional<std::string> stratify) {
  const DesignRun run = read_design_run(dataset, typical, model, iiv, iov, effects, residual, lloq,
                                        seed, replicates, method, threads);
  VpcOptions options;
  options.percentiles = std::move(percentiles);
  options.interval = interval;
  options.bins = bins;
  if (bin_edges) options.bin_edges = std::move(*bin_edges);
  options.prediction_corrected = prediction_corrected;
  if (stratify) {
    if (stratify->empty()) throw InvalidArgument("vpc: stratify is empty; give a dataset column");
    options.stratify = *stratify;
  }
  check_vpc(run, options);
  VpcTable t;
  {
    py::gil_scoped_release nogil;
    t = run_vpc(run, options);
  }
  const auto nb = static_cast<py::ssize_t>(t.bins.size());
  const auto np = static_cast<py::ssize_t>(t.percentiles.size());
  std::vector<std::int64_t> bin, observations;
  std::vector<double> lower, upper, time, observed, simulated, observed_blq, simulated_blq;
  std::vector<std::string> stratum;
  for (std::size_t b = 0; b < t.bins.size(); ++b) {
    const VpcBin& v = t.bins[b];
    stratum.push_back(v.stratum);
    bin.push_back(static_cast<std::int64_t>(b + 1));
    lower.push_back(v.lower);
    upper.push_back(v.upper);
    time.push_back(v.time);
    observations.push_back(v.observations);
    observed.insert(observed.end(), v.observed.begin(), v.observed.end());
    simulated.insert(simulated.end(), v.simulated.begin(), v.simulated.end());
    observed_blq.push_back(v.observed_blq);
    simulated_blq.insert(simulated_blq.end(), v.simulated_blq, v.simulated_blq + 3);
  }
  py::dict out;
  if (!t.stratify.empty()) out["stratum"] = names_of(stratum);
  out["bin"] = take(bin, {nb});
  out["lower"] = take(lower, {nb});
  out["upper"] = take(upper, {nb});
  out["time"] = take(time, {nb});
  out["observations"] = take(observations, {nb});
  out["observed"] = take(observed, {nb, np});
  out["simulated"] = take(simulated, {nb, np, 3});
  if (t.blq) {
    out["observed_blq"] = take(observed_blq, {nb});
    out["simulated_blq"] = take(simulated_blq, {nb, 3});
  }
  const auto no = static_cast<py::ssize_t>(t.observation_time.size());
  out["observation_time"] = take(t.observation_time, {no});
  out["observation_value"] = take(t.observation_value, {no});
  out["observation_stratum"] = take(t.observation_stratum, {no});
  out["strata"] = names_of(t.strata);
  out["stratify"] = t.stratify.empty() ? py::object(py::none()) : py::str(t.stratify);
  out["percentiles"] = take(t.percentiles, {np});
  out["interval"] = t.interval;
  out["replicates"] = t.replicates;
  out["prediction_corrected"] = t.prediction_corrected;
  return out;
}

}  // namespace

void bind_vpc(py::module_& m) {
  m.def("vpc", &vpc_py, kVpcDoc, py::arg("dataset"), py::arg("typical"), py::kw_only(),
        py::arg("model") = py::none(), py::arg("iiv") = py::none(), py::arg("iov") = py::none(),
        py::arg("effects") = py::none(), py::arg("residual") = py::none(),
        py::arg("lloq") = py::none(), py::arg("seed") = 0, py::arg("replicates") = 100,
        py::arg("method") = "auto", py::arg("threads") = 0,
        py::arg("percentiles") = std::vector<double>{5.0, 50.0, 95.0}, py::arg("interval") = 90.0,
        py::arg("bins") = 0, py::arg("bin_edges") = py::none(),
        py::arg("prediction_corrected") = false, py::arg("stratify") = py::none());
}

}  // namespace pkscan::python
