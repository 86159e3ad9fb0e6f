#pragma once
// The readers behind read_result (read.hpp; private to pkscan::output): read_csv.cpp reads CSV
// results and picks what to read, read_h5.cpp reads HDF5 results.
#include <pkscan/output/read.hpp>
#include <string>
#include <vector>

namespace pkscan::output::detail {

// Picks the compartment to read: the asked one, else central, else the first.
// @throws InvalidArgument when the result has none or `asked` is not one of them
std::string choose_compartment(const std::vector<std::string>& available, const std::string& asked);

// An HDF5 result: its summary when it has one, else the first max_subjects subjects.
Curves read_h5(const std::string& path, const std::string& asked, int max_subjects);

}  // namespace pkscan::output::detail
