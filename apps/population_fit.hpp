#pragma once
// `pkscan fit FILE.yaml`: a population fit file (docs/run-files.md, "Fit files"). The objective
// (NONMEM's FO, FOCE or FOCEI) and each subject's EBE at the file's estimates
// (max_evaluations: 0), written as `output.path` (the estimates and the OFV) and
// `<stem>.subjects.csv` (the EBEs and OBJI).
#include <ostream>
#include <string>

namespace pkscan::cli {

// True for a path that names a fit file (.yaml or .yml) rather than a dataset.
bool is_fit_file(const std::string& path);

// Runs the fit file. Returns the exit status.
// @throws pkscan::Error for bad input (mapped to exit statuses by run_cli).
int run_population_fit(const std::string& file, int threads, bool quiet, std::ostream& out,
                       std::ostream& err);

}  // namespace pkscan::cli
